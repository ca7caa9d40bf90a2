"""Tune the DataLoader: measure the training loader's samples/s over a grid of settings, without a model.

The grid is ``num_workers`` x ``pin_memory`` x ``persistent_workers``, optionally x ``batch_size``. The command
itself is bench_data.

    python -m lab.extensions.tools.bench_data [train overrides: data=..., data.*=..., experiment=...] [--workers 0,2,4]

Each setting builds the same loader training does (``lab.data.loaders.make_loader``: same sampler, worker seeding and
drop_last). It walks it as the trainer does (``EpochLoader``), with a fresh iterator per epoch, so worker start-up
counts unless the workers persist. Each batch moves to the run's device with ``non_blocking`` copies.
``pin_memory`` is tried only on CUDA, where it matters, and ``persistent_workers`` only with workers. The simplest
setting within 5% of the fastest wins and is printed as ``recommended overrides: ...``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf

from lab.data.batches import size as batch_size_of
from lab.data.batches import split as split_batch
from lab.data.batches import to_device
from lab.data.common import dataset_len
from lab.data.loaders import EpochLoader, make_loader

TOLERANCE = 0.05  # settings within 5% of the fastest count as fast


@dataclass(frozen=True)
class Setting:
    batch_size: int
    num_workers: int
    pin_memory: bool
    persistent_workers: bool

    def overrides(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
        }


@dataclass
class Row:
    setting: Setting
    samples_per_s: float
    first_batch_s: float  # iterator creation to first batch on device: shows worker start-up


def default_workers(cpus: int | None = None) -> list[int]:
    """Return 0, then powers of two up to the CPU count, at most 8. That is 0 and 2 on a 2-core machine."""
    cpus = cpus or os.cpu_count() or 1
    return [0] + [n for n in (2, 4, 8) if n <= max(cpus, 2)]


def grid(
    batch_sizes: Sequence[int], workers: Sequence[int], cuda: bool, pin_memory: Sequence[bool] | None = None
) -> list[Setting]:
    """Return every meaningful combination: pinning only on CUDA, persistent workers only with workers."""
    pins = list(pin_memory) if pin_memory is not None else ([False, True] if cuda else [False])
    out = []
    for batch in batch_sizes:
        for n in workers:
            for pin in pins:
                for persistent in [False, True] if n > 0 else [False]:
                    out.append(Setting(batch, n, pin, persistent))
    return out


def measure(
    dataset: Any, data_cfg: Any, setting: Setting, device: torch.device, epochs: int, batches: int, seed: int = 0
) -> Row:
    """Return samples/s over `epochs` passes of at most `batches` batches each, moved to `device`."""
    cfg = cast(DictConfig, OmegaConf.merge(data_cfg, setting.overrides()))  # a merge of two DictConfigs
    generator = torch.Generator().manual_seed(seed)
    loader = make_loader(dataset, cfg, train=True, generator=generator, pin_memory=setting.pin_memory)
    walker = EpochLoader(loader, generator, seed, limit=batches)
    samples, first = 0, 0.0
    start = time.perf_counter()
    for epoch in range(epochs):
        for index, batch in enumerate(walker.epoch(epoch)):
            _, targets = to_device(split_batch(batch), device)
            samples += batch_size_of(targets)
            if epoch == 0 and index == 0:
                _sync(device)
                first = time.perf_counter() - start
    _sync(device)
    elapsed = time.perf_counter() - start
    del walker, loader  # non-persistent workers end with their iterator; persistent ones with the loader
    return Row(setting, samples / elapsed, first)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def recommend(rows: Sequence[Row]) -> Row:
    """Pick the simplest setting within TOLERANCE of the fastest.

    Prefer fewest workers, then no pinning, then the largest batch. The batch size also changes the optimisation,
    so it is only printed when the grid had several."""
    best = max(row.samples_per_s for row in rows)
    fast = [row for row in rows if row.samples_per_s >= (1 - TOLERANCE) * best]
    return min(
        fast,
        key=lambda r: (
            r.setting.num_workers,
            r.setting.pin_memory,
            not r.setting.persistent_workers,
            -r.setting.batch_size,
        ),
    )


def recommendation_line(row: Row, batch_sizes: Sequence[int], cuda: bool) -> str:
    s = row.setting
    parts = [f"data.num_workers={s.num_workers}"]
    if s.num_workers > 0:
        parts.append(f"data.persistent_workers={str(s.persistent_workers).lower()}")
    if cuda:
        parts.append(f"data.pin_memory={str(s.pin_memory).lower()}")
    if len(set(batch_sizes)) > 1:
        parts.append(f"data.batch_size={s.batch_size}")
    return "recommended overrides: " + " ".join(parts)


def table(rows: Sequence[Row], best: Row) -> str:
    head = ("batch_size", "num_workers", "pin_memory", "persistent", "samples/s", "first batch s", "vs best")
    top = max(row.samples_per_s for row in rows)
    lines = []
    for row in rows:
        s = row.setting
        mark = "  <- recommended" if row is best else ""
        lines.append(
            (
                str(s.batch_size),
                str(s.num_workers),
                str(s.pin_memory).lower(),
                str(s.persistent_workers).lower() if s.num_workers else "-",
                f"{row.samples_per_s:,.0f}",
                f"{row.first_batch_s:.3f}",
                f"{row.samples_per_s / top:.2f}{mark}",
            )
        )
    widths = [max(len(head[i]), *(len(line[i]) for line in lines)) for i in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*x) for x in lines)])


def run(
    cfg: Any,
    *,
    workers: Sequence[int] | None = None,
    batch_sizes: Sequence[int] | None = None,
    pin_memory: Sequence[bool] | None = None,
    epochs: int = 2,
    batches: int = 50,
) -> tuple[list[Row], Row]:
    """Benchmark the training split of cfg.data on cfg.trainer.device and print the table and recommendation.

    Return the rows and the recommended one."""
    from lab import runtime
    from lab.data.datasets import build as build_data

    device = runtime.select_device(cfg.trainer.device)
    dataset = build_data(cfg.data).train
    cuda = device.type == "cuda"
    batch_sizes = list(batch_sizes or [cfg.data.batch_size])
    settings = grid(batch_sizes, list(workers if workers is not None else default_workers()), cuda, pin_memory)
    print(
        f"bench_data: {cfg.data.name} training split ({dataset_len(dataset)} samples) to {device}, {len(settings)} "
        f"settings, {epochs} epochs of at most {batches} batches each",
        flush=True,
    )
    measure(dataset, cfg.data, Setting(batch_sizes[0], 0, False, False), device, 1, 2, cfg.seed)  # warm caches
    rows = [measure(dataset, cfg.data, s, device, epochs, batches, cfg.seed) for s in settings]
    best = recommend(rows)
    print(table(rows, best))
    if not cuda:
        print("(pin_memory only speeds up copies to a CUDA device: not tried here)")
    print(recommendation_line(best, batch_sizes, cuda))
    return rows, best
