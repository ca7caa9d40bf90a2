"""Rank memory of building an FSDP model: the meta-device init (dist.meta_init=auto) against the whole build.

2 CPU ranks (gloo) build a GPT (default 12 layers x 768, vocabulary 50304: 124 M parameters) and shard it with the
template's own code, each way in a fresh pair of processes: `whole` builds it on every rank then shards it (what
dist.meta_init=false does), `meta` builds it on the meta device, shards it and draws each rank's shards
(lab.distributed.meta_init). Prints rank 0's peak resident memory above what it held before the build, as a ratio
to `whole`, beside the size of the rank's own shards, and the seconds each took.

    python bench/meta_init.py [--layers 12] [--width 768] [--vocab 50304]
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import time
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lab.config import options
from lab.distributed import meta_init
from lab.distributed.parallel import FSDP
from lab.models.common import build as build_model


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _worker(rank: int, how: str, model_cfg: Any, data_meta: dict, port: int, results: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    parallel = FSDP(rank=rank, world_size=2)
    fsdp = SimpleNamespace(strategy="fsdp", meta_init=how == "meta", sync_bn=False, reshard_after_forward=True)
    fp32 = SimpleNamespace(autocast_dtype=None)
    cpu = torch.device("cpu")
    importlib.import_module("torch.distributed.fsdp")  # before the measure: the libraries are not the build
    importlib.import_module("torch.distributed.tensor")
    torch.manual_seed(0)
    before, start = _rss(), time.perf_counter()
    rng = torch.random.get_rng_state()
    model = meta_init.build(model_cfg, data_meta, fsdp) if how == "meta" else build_model(model_cfg, data_meta)
    assert model is not None, "this model cannot be built on the meta device"
    model, _ = parallel.wrap(model, cpu, fp32, model_cfg)
    if how == "meta":
        meta_init.materialise(model, cpu, rng, model_cfg)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # since the process started: before <= peak
    shards = sum(p.to_local().numel() * p.element_size() for p in model.parameters())  # type: ignore[operator]
    total = sum(p.numel() for p in model.parameters())
    if rank == 0:
        results.put((how, total, peak - before, shards, seconds))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50304)
    args = parser.parse_args()
    model_cfg = options.instantiate(
        "model",
        {
            "name": "gpt",
            "n_layer": args.layers,
            "n_embd": args.width,
            "n_head": max(1, args.width // 64),
            "dropout": 0.0,
        },
    )
    data_meta = {"vocab_size": args.vocab, "block_size": 1024}
    context = mp.get_context("spawn")
    rows = {}
    for port, how in enumerate(("whole", "meta"), start=29771):
        results = context.SimpleQueue()
        mp.start_processes(_worker, args=(how, model_cfg, data_meta, port, results), nprocs=2, start_method="spawn")
        name, total, grown, shards, seconds = results.get()
        rows[name] = (grown, shards, seconds)
    print(f"GPT {args.layers} x {args.width}, vocabulary {args.vocab}: {total / 1e6:.0f} M parameters, 2 CPU ranks")
    print(f"{'build':<6} {'rank-0 peak growth MiB':>23} {'x whole':>8} {'its shards MiB':>15} {'seconds':>8}")
    for name, (grown, shards, seconds) in rows.items():
        ratio = grown / rows["whole"][0]
        print(f"{name:<6} {grown / 2**20:23.0f} {ratio:8.2f} {shards / 2**20:15.0f} {seconds:8.2f}")


if __name__ == "__main__":
    main()
