"""Measure memory and speed of data=hf (memory-mapped Arrow tables) as the table grows; memory should stay flat.

CSVs of 1x, 5x and 10x --base-mb are generated (20, 100 and 200 MB by default). Each step runs in its own forked
child, so its figures exclude the imports the parent already holds:
  - prepare: ``scripts/prepare_data.py data=hf``. Peak memory, seconds, seconds per GB of CSV.
  - build: ``build()``, i.e. the split and the statistics pass. Peak memory, seconds.
  - epoch: one epoch of shuffled batches through ``lab.data.loaders.make_loader``. Peak memory, samples/s.
Memory that grows with the rows (row numbers at 4 bytes a row, the permutation at 8) is printed per row, next to
the table's bytes a row. The epoch is also run with torch's DistributedSampler, which keeps the permutation as
Python ints, for comparison.

Peak memory is shown two ways, both above the child's start. VmHWM counts every resident page, including the
mapped table, which is file cache the kernel can drop. RssAnon, sampled every 2 ms, is the process's own memory:
the part that must stay flat for a table larger than RAM. Finally, on the 1x table, it compares loader samples/s
(no model) of data=hf against data=csv, which holds the whole table in memory.

    python -m lab.extensions.hf.bench_table_memory                  # 20, 100, 200 MB
    python -m lab.extensions.hf.bench_table_memory --base-mb 50 --scales 1,4 --batch-size 512
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TQDM_DISABLE", "1")  # keep prepare's progress bar out of the output

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import torch
from torch.utils.data import DistributedSampler

import lab.extensions.hf.data  # noqa: F401  (datasets and pyarrow imported once, in the parent the children fork from)
from lab.data.common import OrderedDataset
from lab.data.loaders import make_loader
from lab.data.options import CsvConfig
from lab.extensions.hf.options import HfDataConfig

FEATURES = 8
CHUNK_ROWS = 20_000  # rows generated at a time, so the CSV lands within ~2 MB of its size


def write_csv(path: Path, megabytes: float, seed: int = 0) -> int:
    """Write a CSV of about `megabytes` MB: 8 float features, an integer count, a text column, a value target."""
    rng = np.random.default_rng(seed)
    rows, target = 0, megabytes * 1e6
    n = int(min(CHUNK_ROWS, max(1000, target / 110)))  # ~110 bytes a row
    with pa.OSFile(str(path), "wb") as sink, pcsv.CSVWriter(sink, _schema()) as writer:
        while sink.tell() < target:
            x = np.round(rng.normal(size=(n, FEATURES)), 5)
            columns = {f"x{j}": x[:, j] for j in range(FEATURES)}
            columns["count"] = rng.integers(0, 50, n)
            columns["segment"] = np.array(["north", "south", "east", "west"])[rng.integers(0, 4, n)]
            columns["target"] = np.round(x @ np.linspace(-1, 1, FEATURES) + rng.normal(0, 0.1, n), 5)
            writer.write_table(pa.table(columns, schema=_schema()))
            rows += n
    return rows


def _schema() -> pa.Schema:
    fields = [pa.field(f"x{j}", pa.float64()) for j in range(FEATURES)]
    return pa.schema([*fields, ("count", pa.int64()), ("segment", pa.string()), ("target", pa.float64())])


def _status(key: str) -> int:
    """Read a /proc/self/status figure, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


_PEAK = [0]  # in a measuring child: the highest RssAnon sampled since the last phase() or the start


def phase() -> int:
    """Return the RssAnon peak of the phase that ends here, and start the next phase from the current RssAnon."""
    peak = max(_PEAK[0], _status("RssAnon"))
    _PEAK[0] = _status("RssAnon")
    return peak


def _child(queue: Any, work: Any, args: tuple) -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM: the peak inherited by the fork is the parent's, not this work's
    except OSError:
        pass
    start = {"rss": _status("VmRSS"), "anon": _status("RssAnon")}
    _PEAK[0], stop = start["anon"], threading.Event()

    def sample() -> None:  # the kernel keeps no RssAnon peak, so sample it
        while not stop.wait(0.002):
            _PEAK[0] = max(_PEAK[0], _status("RssAnon"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        out = work(*args)
    seconds = time.perf_counter() - began
    stop.set()
    sampler.join()
    last = phase()
    figures = {"seconds": seconds, "hwm": _status("VmHWM"), "anon": max(last, out.get("build_anon", 0))}
    queue.put({**out, **figures, "last_anon": last, **{"start_" + k: v for k, v in start.items()}})


def in_child(work: Any, *args: Any) -> dict[str, Any]:
    """Run `work(*args)` in a forked child; return its dict of figures plus peak memory and seconds."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue, work, args))
    child.start()
    result = queue.get()
    child.join()
    if child.exitcode:
        raise RuntimeError(f"the measuring child exited with {child.exitcode}")
    return result


def prepare(csv: Path, out: Path) -> dict[str, Any]:
    HfDataConfig(path=str(out), source=str(csv), target="target", target_type="value").prepare()
    return {}


def epoch(cfg: Any, own_order: bool = True) -> dict[str, Any]:
    """Run build() and one training epoch, touching inputs and targets as a model would.

    Batches come in training's order: the dataset's own sampler when it has one, as in
    lab.distributed.Parallel.train_sampler. With own_order=False, or without one, torch's DistributedSampler."""
    began = time.perf_counter()
    module = cfg.build()
    built, build_anon = time.perf_counter() - began, phase()
    seed = 0
    if own_order and isinstance(module.train, OrderedDataset):
        sampler = module.train.train_sampler(0, 1, seed)
    else:
        sampler = DistributedSampler(module.train, num_replicas=1, rank=0, shuffle=True, seed=seed)
    generator = torch.Generator().manual_seed(0)
    loader = make_loader(module.train, cfg, train=True, generator=generator, pin_memory=False, sampler=sampler)
    samples, checksum, began = 0, 0.0, time.perf_counter()
    for x, y in loader:
        samples += len(y)
        checksum += float(x[0, 0]) + float(y[0])
    seconds = time.perf_counter() - began
    return {"build_s": built, "build_anon": build_anon, "samples": samples, "samples_per_s": samples / seconds}


def mib(value: float) -> str:
    return f"{value / 2**20:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-mb", type=float, default=20.0, help="the 1x CSV's size")
    parser.add_argument("--scales", default="1,5,10", help="CSV sizes as multiples of --base-mb")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2, help="epochs timed for the hf vs csv speed (best kept)")
    parser.add_argument("--dir", default=None, help="where the CSVs and Arrow folders go (default: a temp folder)")
    args = parser.parse_args()
    scales = [float(s) for s in args.scales.split(",")]

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        rows: dict[float, dict[str, Any]] = {}
        for scale in scales:
            csv = root / f"table-{scale:g}x.csv"
            count = write_csv(csv, args.base_mb * scale)
            size = csv.stat().st_size
            prepared = in_child(prepare, csv, root / f"arrow-{scale:g}x")
            arrow_bytes = sum(part.stat().st_size for part in (root / f"arrow-{scale:g}x").glob("*.arrow"))
            cfg = HfDataConfig(path=str(root / f"arrow-{scale:g}x"), target="target", target_type="value")
            cfg.batch_size = args.batch_size
            read, listed = in_child(epoch, cfg), in_child(epoch, cfg, False)
            rows[scale] = {"csv": csv, "rows": count, "bytes": size, "arrow_bytes": arrow_bytes}
            rows[scale].update(prepare=prepared, epoch=read, listed=listed)
            if scale != scales[0]:
                csv.unlink()  # only the 1x CSV is read again, by data=csv

        print(f"data=hf peak memory, MiB over the child's start (imports); batch {args.batch_size}")
        print("  RssAnon: the process's own memory; VmHWM: every resident page, the mapped table's included")
        print(
            f"{'CSV':>10} {'rows':>9} | {'prepare':>7} {'VmHWM':>7} {'s':>6} {'s/GB':>5} | {'build':>7} "
            f"{'epoch':>7} {'VmHWM':>7} {'build s':>7} {'samples/s':>9} | {'epoch*':>7}"
        )
        for row in rows.values():
            p, e = row["prepare"], row["epoch"]
            print(
                f"{row['bytes'] / 1e6:7.0f} MB {row['rows']:>9} | {mib(p['anon'] - p['start_anon'])} "
                f"{mib(p['hwm'] - p['start_rss'])} {p['seconds']:6.2f} {p['seconds'] / (row['bytes'] / 1e9):5.1f} | "
                f"{mib(e['build_anon'] - e['start_anon'])} {mib(e['last_anon'] - e['start_anon'])} "
                f"{mib(e['hwm'] - e['start_rss'])} {e['build_s']:7.2f} {e['samples_per_s']:9.0f} | "
                f"{mib(row['listed']['last_anon'] - row['listed']['start_anon'])}"
            )
        print("  epoch*: the same epoch in torch's DistributedSampler (the same order, listed as Python ints)")
        first, last = rows[scales[0]], rows[scales[-1]]
        more_rows = max(last["rows"] - first["rows"], 1)
        table_per_row = last["arrow_bytes"] / last["rows"]
        times = last["bytes"] / first["bytes"]
        print(f"from {scales[0]:g}x to {scales[-1]:g}x ({times:.1f}x the data), RssAnon grows by:")
        for what, phase, key in (
            ("prepare", "prepare", "anon"),
            ("build", "epoch", "build_anon"),
            ("epoch", "epoch", "last_anon"),
            ("epoch*", "listed", "last_anon"),
        ):
            grown = last[phase][key] - last[phase]["start_anon"] - (first[phase][key] - first[phase]["start_anon"])
            print(
                f"  {what:>7}: {grown / 2**20:7.1f} MiB, {grown / more_rows:5.1f} bytes a row "
                f"(the Arrow table: {table_per_row:.0f} bytes a row)"
            )

        # loader speed on the 1x table: memory-mapped Arrow gathers vs data=csv's in-memory tensors
        csv_cfg = CsvConfig(path=str(first["csv"]), target="target", target_type="value")
        csv_cfg.features = [f"x{j}" for j in range(FEATURES)] + ["count"]  # the same inputs as hf picks
        hf_cfg = HfDataConfig(path=str(root / f"arrow-{scales[0]:g}x"), target="target", target_type="value")
        for cfg in (csv_cfg, hf_cfg):
            cfg.batch_size = args.batch_size
        speed = {"csv": [], "hf": []}
        for _ in range(args.repeats):  # alternate, so machine noise hits both
            for name, cfg in (("csv", csv_cfg), ("hf", hf_cfg)):
                speed[name].append(in_child(epoch, cfg))
        best = {name: max(r["samples_per_s"] for r in runs) for name, runs in speed.items()}
        builds = {name: min(r["build_s"] for r in runs) for name, runs in speed.items()}
        print(f"1x table ({first['bytes'] / 1e6:.0f} MB, {first['rows']} rows), one epoch of batches, no model:")
        print(f"  data=csv (in memory): {best['csv']:10.0f} samples/s   build {builds['csv']:6.2f} s")
        print(f"  data=hf  (mapped):    {best['hf']:10.0f} samples/s   build {builds['hf']:6.2f} s")
        print(f"  hf / csv samples/s: {best['hf'] / best['csv']:.2f}")


if __name__ == "__main__":
    main()
