"""data=tokens (BPE token windows read from memory-mapped files) against data=text (the char-level corpus held in
memory as one tensor): the training loader's throughput at the same block and batch size, and what the prepare costs.

One process, one temp folder: a corpus of --corpus-mb MB of real text (Python sources of the standard library, in
sorted order) is written, prepared once (``tokens.prepare`` here: the BPE trained, the corpus encoded into
uint16 files) and timed; then the two training loaders (``lab.data.make_loader``, as training builds them: shuffled,
full batches, the resumable sampler) are drawn from in turns, --seconds each, --repeats times, so machine noise hits
both. Prints tokens/s (best of the repeats and the median) and the same in characters of text per second (a BPE token
stands for several characters, a char token for one), the ratios tokens / text, and the prepare's seconds per MB.

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

from lab.config import TextConfig
from lab.data import make_loader
from lab.extensions.big_data import tokens
from lab.extensions.big_data.options import TokensConfig
from lab.extensions.big_data.tokens import MB


def write_corpus(path: Path, size: float) -> int:
    """`size` bytes of the standard library's *.py (its tests included, site-packages left out), concatenated in
    sorted path order; returns the characters."""
    root = Path(sysconfig.get_paths()["stdlib"])
    written = chars = 0
    with open(path, "w", encoding="utf-8") as out:
        for source in sorted(root.rglob("*.py")):
            if "site-packages" in source.parts:  # what pip installed: not the standard library
                continue
            text = source.read_text(encoding="utf-8", errors="replace")
            out.write(text)
            written, chars = written + len(text.encode("utf-8")), chars + len(text)
            if written >= size:
                break
    return chars


def draw(loader, seconds: float) -> tuple[float, int]:
    """Batches drawn for about `seconds` (a new epoch when one ends): (seconds, windows)."""
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
        # the char loader holds its corpus as one int64 tensor: the first 5 M characters are plenty to time it
        text_cfg = TextConfig(path=str(corpus), level="char", max_chars=min(chars, 5_000_000), **common)
        loaders, per_token = {}, {}
        for name, cfg, unit in (("tokens", tokens_cfg, chars_per_token), ("text", text_cfg, 1.0)):
            train = cfg.build().train
            loaders[name] = make_loader(train, cfg, train=True, generator=torch.Generator(), pin_memory=False)
            per_token[name] = unit
        rates: dict[str, list[float]] = {name: [] for name in loaders}
        for loader in loaders.values():  # warm-up: the first pages read, the workers started
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
