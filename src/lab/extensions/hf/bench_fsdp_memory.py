"""Measure each rank's peak memory building model=hf under dist=fsdp: whole on every rank, or each reading its shards.

A Llama-like causal LM with random weights (about 160 MB of float32 at the default size) is written once to a temp
dir with `save_pretrained` (safetensors; nothing downloads). Then 2 ranks on the CPU (gloo) build it twice, each
way in fresh processes, through the same core calls a training run makes:
  - whole: `from_pretrained` on every rank, then `fully_shard` per block (dist.meta_init=false);
  - shards: built on the meta device, sharded, then each rank reads its slices of the safetensors file
    (`lab.extensions.hf.sharded_load`, dist.meta_init=auto).
A rank's peak is its resident memory's high-water mark (Linux VmHWM, reset just before the build) above its resident
memory just before it, so the imports and the process group are not counted. The mapped file's pages a rank reads
count too: they are resident while it reads them.

    python -m lab.extensions.hf.bench_fsdp_memory                           # ~160 MB of weights
    python -m lab.extensions.hf.bench_fsdp_memory --dtype bfloat16          # model.dtype=bfloat16: a cast copy
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no progress bars among the figures

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lab.config import options
from lab.distributed import meta_init
from lab.distributed.parallel import FSDP
from lab.extensions.hf.options import DTYPES
from lab.models.common import build as build_model

WAYS = {"whole": "from_pretrained on every rank, then sharded", "shards": "meta, sharded, each rank reads its slices"}
WORLD = 2


def write_model(folder: Path, hidden: int, layers: int, vocab: int) -> int:
    """Write a Llama-like causal LM with random weights to `folder`; return its parameter count."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64), max_position_embeddings=256, pad_token_id=0,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def _kb(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))  # type: ignore[union-attr]


class _Sampler:
    """The largest RssAnon (the process's own memory, not the mapped file's pages) seen every millisecond."""

    def __init__(self) -> None:
        self.peak, self.done = _kb("RssAnon"), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.001):
            self.peak = max(self.peak, _kb("RssAnon"))

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return max(self.peak, _kb("RssAnon"))


def _rank(rank: int, way: str, folder: str, vocab: int, dtype: str, port: int, out: str) -> None:
    """One rank: build the model `way`, then write how far its resident memory rose above where it was."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    import transformers.models.llama.modeling_llama  # noqa: F401  (imported before the measure starts)

    model_cfg = {"name": "hf", "name_or_path": folder, "dtype": dtype}
    meta = {"input_shape": [8], "num_outputs": vocab, "vocab_size": vocab, "block_size": 8, "pad_token_id": 0}
    parallel = FSDP(rank=rank, world_size=WORLD)
    cpu, precision = torch.device("cpu"), SimpleNamespace(autocast_dtype=None)
    dist.barrier()
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again from here
    before, own = _kb("VmRSS"), _kb("RssAnon")
    sampler = _Sampler()
    if way == "whole":
        model, _ = parallel.wrap(build_model(model_cfg, meta), cpu, precision, model_cfg)
    else:
        rng = torch.random.get_rng_state()
        model, _ = parallel.wrap(
            meta_init.build(model_cfg, meta, SimpleNamespace(meta_init=True)), cpu, precision, model_cfg
        )
        options.instantiate("model", model_cfg).materialise(model, cpu, rng)
    figures = {"peak_kb": _kb("VmHWM") - before, "own_kb": sampler.stop() - own}
    figures["held_bytes"] = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    Path(out, f"{way}-{rank}.json").write_text(json.dumps(figures))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(hidden: int, layers: int, vocab: int, dtype: str = "float32") -> dict[str, list[dict]]:
    """Write the model, build it both ways on 2 ranks; return each way's per-rank figures."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "model")
        count = write_model(folder, hidden, layers, vocab)
        size = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        print(f"model: {count:,} parameters, {size / 2**20:.1f} MiB of safetensors, {WORLD} ranks (gloo, CPU)")
        figures = {}
        for way in WAYS:
            mp.spawn(_rank, (way, str(folder), vocab, dtype, _free_port(), tmp), nprocs=WORLD, join=True)
            figures[way] = [json.loads(Path(tmp, f"{way}-{rank}.json").read_text()) for rank in range(WORLD)]
    return figures


def table(figures: dict[str, list[dict]]) -> str:
    """Return the figures as a table: per way and rank, the peak above the start and the shard it keeps."""
    lines = [f"{'way':<8}{'rank':>6}{'peak RSS MiB':>14}{'peak own MiB':>14}{'kept MiB':>10}  how"]
    for way, ranks in figures.items():
        for rank, got in enumerate(ranks):
            peak, own, held = got["peak_kb"] / 1024, got["own_kb"] / 1024, got["held_bytes"] / 2**20
            lines.append(f"{way:<8}{rank:>6}{peak:>14.1f}{own:>14.1f}{held:>10.1f}  {WAYS[way]}")
    for key, what in (("peak_kb", "RSS"), ("own_kb", "own")):
        whole, shards = (max(r[key] for r in figures[way]) for way in WAYS)
        lines.append(f"peak {what} ratio whole / shards (the larger rank's): {whole / max(shards, 1):.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="model.dtype (the file is float32)")
    args = parser.parse_args(argv)
    print(table(measure(args.hidden, args.layers, args.vocab, args.dtype)))


if __name__ == "__main__":
    main()
