"""Checkpoint save under FSDP: sharded (DCP, each rank writes its shards) against the full gather to rank 0.

2 CPU ranks (gloo) train a model of --params parameters (default 100 M: 12 linear layers) with AdamW for a step, so
the optimizer holds its two moments too, then save it through the template's own CheckpointManager, each way in a
fresh pair of processes (a process's peak memory only grows):
  full   the gather of the whole model and optimizer to rank 0's CPU, written by rank 0 with one torch.save
  dcp    every rank writes its own shards (lab.checkpointing.sharded), no gather
  async  the same in the background (trainer.async_save): the stall is the time until save() returns
Prints seconds per save (best of --repeats) and rank 0's peak resident memory while saving, each as a ratio to
`full` (goals: time <= 0.5x, memory <= 0.6x), rank 0's memory before the first save (its shards, the optimizer's,
torch itself), and the async stall against the sync dcp save.

    python bench/sharded_checkpoint.py [--params 100e6] [--repeats 2] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from lab.checkpointing import CheckpointManager
from lab.distributed.parallel import FSDP

WIDTH = 2048


def _rss() -> int:
    """This process's resident memory, bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """Samples the resident memory every 5 ms in a thread: the peak of a stretch of code."""

    def __enter__(self) -> PeakMemory:
        self.peak, self._stop = _rss(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _model(params: float) -> nn.Module:
    layers = max(2, round(params / (WIDTH * 2 * WIDTH)))  # pairs of 2048 <-> 4096 linear layers
    blocks = [nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)) for _ in range(layers // 2)]
    return nn.Sequential(*blocks)


def _worker(rank: int, how: str, params: float, repeats: int, out_dir: str, port: int, results: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = _model(params)
    total = sum(p.numel() for p in model.parameters())
    for block in model:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, WIDTH)).square().mean().backward()
    optimizer.step()  # the moments exist: a checkpoint holds three times the weights
    optimizer.zero_grad(set_to_none=True)  # as in training between steps
    parallel = FSDP(rank=rank, world_size=2)
    manager = CheckpointManager(Path(out_dir) / how, parallel, async_save=how == "async")
    times, stalls, peaks, before = [], [], [], _rss()
    for step in range(repeats):
        state: dict[str, Any] = {"progress": {"global_step": step}, "rng": {}}
        dist.barrier()
        with PeakMemory() as memory:
            start = time.perf_counter()
            if how == "full":
                state["model"] = parallel.model_state(model)
                state["optimizer"] = parallel.optimizer_state(model, optimizer)
            else:
                state["shards"] = parallel.sharded_state(model, optimizer)
            manager.save(state, best=False)
            stalls.append(time.perf_counter() - start)
            manager.wait()
            dist.barrier()
            times.append(time.perf_counter() - start)
            del state
        peaks.append(memory.peak)
    if rank == 0:
        results.put((how, total, min(times), min(stalls), max(peaks), before))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=float, default=100e6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the checkpoints go (default: a temp dir)")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    rows = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as out_dir:
        for port, how in enumerate(("full", "dcp", "async"), start=29731):
            results = context.SimpleQueue()
            mp.start_processes(
                _worker,
                args=(how, args.params, args.repeats, out_dir, port, results),
                nprocs=2,
                start_method="spawn",
            )
            name, total, seconds, stall, peak, before = results.get()
            rows[name] = (seconds, stall, peak, before)
    print(f"{total / 1e6:.0f} M parameters + AdamW moments, 2 CPU ranks (gloo), best of {args.repeats} saves")
    full_seconds, _, full_peak, _ = rows["full"]
    print(
        f"{'save':<6} {'seconds':>8} {'x full':>7} {'stall s':>8} {'rank-0 peak GiB':>16} {'x full':>7} {'before':>7}"
    )
    for name, (seconds, stall, peak, before) in rows.items():
        print(
            f"{name:<6} {seconds:8.2f} {seconds / full_seconds:7.2f} {stall:8.2f} {peak / 2**30:16.2f} "
            f"{peak / full_peak:7.2f} {before / 2**30:7.2f}"
        )
    print(f"async stall / sync dcp save: {rows['async'][1] / rows['dcp'][0]:.2f}")


if __name__ == "__main__":
    main()
