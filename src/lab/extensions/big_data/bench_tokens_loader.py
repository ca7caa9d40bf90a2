"""Compare the training loader of data=tokens with data=text's, and time the prepare.

data=tokens reads BPE token windows from memory-mapped files; data=text holds a char-level corpus in memory as one
tensor. Both use the same block and batch size.

It writes --corpus-mb MB of real text (the standard library's Python sources) to a temp folder and times
``tokens.prepare`` on it. Then it draws from both training loaders, built as training builds them, in turns of
--seconds, --repeats times, so machine noise hits both. It prints tokens/s (best and median) and characters/s,
since a BPE token stands for several characters, plus the ratios and the prepare's seconds per MB.

    python -m lab.extensions.big_data.bench_tokens_loader [--corpus-mb 20] [--seconds 2] [--repeats 3] [--workers 0]
                                                          [--block-size 128]
"""

from __future__ import annotations

import argparse
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path

import torch

from lab.data import make_loader
from lab.data.options import TextConfig
from lab.extensions.big_data import tokens
from lab.extensions.big_data.options import TokensConfig
from lab.extensions.big_data.tokens import MB


def write_corpus(path: Path, size: float) -> int:
    """Return about `size` bytes of the standard library's *.py files, tests included, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    written = chars = 0
    with open(path, "w", encoding="utf-8") as out:
        for source in sorted(root.rglob("*.py")):
            if "site-packages" in source.parts:  # installed packages, not the standard library
                continue
            text = source.read_text(encoding="utf-8", errors="replace")
            out.write(text)
            written, chars = written + len(text.encode("utf-8")), chars + len(text)
            if written >= size:
                break
    return chars


def draw(loader, seconds: float) -> tuple[float, int]:
    """Draw batches for about `seconds`, starting a new epoch as needed; return (seconds, windows)."""
    windows, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for inputs, _ in loader:
            windows += len(inputs)
            if time.perf_counter() - start >= seconds:
                break
    return time.perf_counter() - start, windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-mb", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=2.0, help="per loader and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers of both loaders")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=4096)
    args = parser.parse_args()
    torch.manual_seed(0)
    common = {"block_size": args.block_size, "batch_size": args.batch_size, "num_workers": args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        chars = write_corpus(corpus, args.corpus_mb * MB)
        size = corpus.stat().st_size / MB
        tokens_cfg = TokensConfig(path=f"{tmp}/tokens", source=str(corpus), vocab_size=args.vocab_size, **common)
        start = time.perf_counter()
        manifest = tokens.prepare(tokens_cfg)
        prepare_s = time.perf_counter() - start
        info = manifest["info"]
        chars_per_token = chars / info["tokens"]
        # the char loader holds its corpus as one int64 tensor; 5 M characters are plenty to time it
        text_cfg = TextConfig(path=str(corpus), level="char", max_chars=min(chars, 5_000_000), **common)
        loaders, per_token = {}, {}
        for name, cfg, unit in (("tokens", tokens_cfg, chars_per_token), ("text", text_cfg, 1.0)):
            train = cfg.build().train
            loaders[name] = make_loader(train, cfg, train=True, generator=torch.Generator(), pin_memory=False)
            per_token[name] = unit
        rates: dict[str, list[float]] = {name: [] for name in loaders}
        for loader in loaders.values():  # warm up: read the first pages, start the workers
            draw(loader, min(args.seconds, 0.5))
        for _ in range(args.repeats):
            for name, loader in loaders.items():
                seconds, windows = draw(loader, args.seconds)
                rates[name].append(windows * args.block_size / seconds)

    print(
        f"\n=== {size:.1f} MB of text ({chars:,} characters): {info['tokens']:,} BPE tokens of a {info['vocab_size']}"
        f"-symbol vocabulary ({chars_per_token:.2f} characters per token, {info['dtype']} files); block "
        f"{args.block_size}, batch {args.batch_size}, {args.workers} worker(s), {args.repeats} x {args.seconds:g} s"
    )
    print(
        f"prepare (train the BPE + encode + write): {prepare_s:.1f} s = {prepare_s / size:.2f} s/MB "
        f"({size / prepare_s:.2f} MB/s)"
    )
    labels = {"tokens": "data=tokens (memmap, BPE)", "text": "data=text (in memory, char)"}
    for name, values in rates.items():
        print(
            f"{labels[name]:>30}: {max(values):12,.0f} tokens/s (best; median {statistics.median(values):,.0f}) "
            f"= {max(values) * per_token[name]:12,.0f} characters/s"
        )
    ratio = max(rates["tokens"]) / max(rates["text"])
    print(f"ratio data=tokens / data=text: {ratio:.2f} in tokens/s, {ratio * chars_per_token:.2f} in characters/s")


if __name__ == "__main__":
    main()
