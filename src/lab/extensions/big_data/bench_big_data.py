"""Compare data=shards with the same images held in memory, and watch its memory as the data grows.

It writes a temp folder of random-pixel PNGs, which compress about as badly as photos, then measures:
  1. prepare: shards.prepare, in seconds per GB.
  2. samples/s of the training loader (decode, augment, collate) with 0 and 2 workers, over three stores of the
     same images: encoded bytes in a Python list (the in-memory baseline), the image folder (data=image_folder)
     and the shards (data=shards). Best of --repeats epochs. The goal is shards / in memory >= 0.8.
  3. peak RSS of building data=shards and reading one epoch, for shards of 1x, 5x and 10x the images, each in a
     fresh forked child. The goal is flat memory, since shards are memory-mapped and only data.open_shards are
     open at a time. This runs before step 2, because a forked child starts from its parent's RSS.

    python -m lab.extensions.big_data.bench_big_data [--images 2000] [--size 128] [--workers 0,2]
                             [--scales 1,5,10] [--repeats 2] [--batch-size 64] [--samples-per-shard 100]
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from lab import data
from lab.config import options
from lab.data import folder, prepared
from lab.distributed.parallel import Parallel
from lab.extensions.big_data import shards


def write_images(root: Path, count: int, size: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(count):
        split = "val" if i % 10 < 1 or i % 10 == 5 else "train"  # both parities, so every class is in val
        target = root / split / f"class{i % 2}"
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(target / f"{i}.png")


class InMemory(Dataset):
    """The baseline: the same encoded images read from a Python list, decoded exactly as data=shards does."""

    def __init__(self, samples: list[tuple[str, int]], decode: shards.ImageSample) -> None:
        self.items = [(Path(path).read_bytes(), label) for path, label in samples]
        self.decode = decode

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        encoded, label = self.items[index]
        return self.decode({".png": io.BytesIO(encoded), ".cls": io.BytesIO(str(label).encode()), "__key__": ""})


def epochs_of(dataset: Dataset, cfg) -> data.EpochLoader:
    """Return the trainer's training loader, with data=shards' own order or a shuffle for the others."""
    generator = torch.Generator().manual_seed(0)
    sampler = Parallel().train_sampler(dataset, seed=0)
    loader = data.make_loader(dataset, cfg, train=True, generator=generator, pin_memory=False, sampler=sampler)
    return data.EpochLoader(loader, generator, 0)


def timed_epoch(epochs: data.EpochLoader, epoch: int) -> float:
    start, seen = time.perf_counter(), 0
    for x, _ in epochs.epoch(epoch):
        seen += len(x)
    return seen / (time.perf_counter() - start)


def loader_rates(loaders: list[data.EpochLoader], repeats: int) -> list[float]:
    """Return each loader's best samples/s over `repeats` epochs, after a warm-up epoch that starts the workers.

    The loaders take turns so machine noise falls on all of them."""
    best = [0.0] * len(loaders)
    for epoch in range(repeats + 1):
        for i, epochs in enumerate(loaders):
            rate = timed_epoch(epochs, epoch)
            best[i] = max(best[i], rate) if epoch else 0.0
    return best


def bigger_shards(base: Path, out: Path, scale: int, per_shard: int) -> int:
    """Write shards of the base train split repeated `scale` times, plus val once; return the train shards' bytes."""
    manifest = prepared.read_manifest(base, shards.KIND, "bench")
    preparer = prepared.Preparer(out, shards.KIND, {"scale": scale}, None, "bench")
    module = options.instantiate("data", {"name": "shards", "path": str(base), "augment": False})
    train = module.build().train
    raw = []
    for i in range(len(train)):
        shard, inner = train.locate(i)
        members = train.shards.get(train.where(train.names[shard]), train.lengths[shard])[inner]
        raw.append({"png": members[".png"].read(), "cls": int(members[".cls"].read())})
    makers = [lambda r=r: dict(r) for r in raw] * scale
    info = dict(manifest["info"])
    info["splits"] = {
        "train": shards.write_shards(preparer, "train", makers, per_shard),
        "val": manifest["info"]["splits"]["val"],
    }
    for part in manifest["parts"]:
        if part["name"].startswith("val"):
            preparer.add(
                part["name"], lambda tmp, name=part["name"]: tmp.write_bytes((base / name).read_bytes()) and None
            )
    preparer.finish(info)
    return sum(p.stat().st_size for p in out.glob("train-*.tar"))


def _rss() -> int:
    """Return this process's resident set size in bytes (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _epoch_peak_rss(path: str, batch_size: int, queue) -> None:
    start = _rss()  # inherited from the parent: the interpreter, torch, this script
    keys = {"name": "shards", "path": path, "image_size": 64, "batch_size": batch_size, "num_workers": 0}
    cfg = options.instantiate("data", keys)
    train = cfg.build().train
    timed_epoch(epochs_of(train, cfg), 0)  # no workers, so all the memory is this process's
    queue.put((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, start))


def peak_rss(path: Path, batch_size: int) -> tuple[int, int]:
    """Return (peak RSS, starting RSS) in bytes of a forked child that builds data=shards and reads one epoch."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_epoch_peak_rss, args=(str(path), batch_size, queue))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"the measuring child failed (exit code {child.exitcode}): see its error above")
    return queue.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--size", type=int, default=128, help="image side in pixels")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--scales", default="1,5,10")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--samples-per-shard", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)  # compare the loaders' cost, not intra-op threads
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_images(root / "images", args.images, args.size)
        source_bytes = sum(p.stat().st_size for p in (root / "images").rglob("*.png"))
        keys = {"image_size": 64, "batch_size": args.batch_size}
        cfg = options.instantiate(
            "data",
            {
                "name": "shards",
                "source": str(root / "images"),
                "path": str(root / "shards"),
                "samples_per_shard": args.samples_per_shard,
                **keys,
            },
        )
        start = time.perf_counter()
        cfg.prepare()
        seconds = time.perf_counter() - start
        print(
            f"\nprepare: {args.images} images, {source_bytes / 1e6:.1f} MB: {seconds:.2f} s = "
            f"{seconds / (source_bytes / 1e9):.1f} s/GB"
        )

        print("\npeak RSS of one training epoch on data=shards (a fresh process each):")
        print(f"{'scale':>6} {'train shards MB':>16} {'peak RSS MB':>12} {'RSS / 1x':>9} {'added by the data MB':>21}")
        first = None
        for scale in [int(s) for s in args.scales.split(",")]:
            path = root / f"shards-x{scale}"
            size = bigger_shards(root / "shards", path, scale, args.samples_per_shard)
            peak, start = peak_rss(path, args.batch_size)
            first = first or peak
            added = (peak - start) / 1e6
            print(f"{scale:>5}x {size / 1e6:>16.1f} {peak / 1e6:>12.1f} {peak / first:>9.2f} {added:>21.1f}")

        print(
            f"\ntraining loader samples/s ({args.size}px PNG -> random resized crop 64 + flip, "
            f"batch {args.batch_size}):"
        )
        print(f"{'workers':>8} {'in memory':>10} {'image_folder':>13} {'shards':>8} {'shards/in memory':>17}")
        for workers in [int(w) for w in args.workers.split(",")]:
            row = {**keys, "num_workers": workers}
            shard_cfg = options.instantiate("data", {"name": "shards", "path": str(root / "shards"), **row})
            folder_cfg = options.instantiate("data", {"name": "image_folder", "root": str(root / "images"), **row})
            built = shard_cfg.build()
            _, splits = folder.folder_splits(folder_cfg, root / "images")
            memory = InMemory(splits["train"], built.train.decode)
            loaders = [(memory, shard_cfg), (folder_cfg.build().train, folder_cfg), (built.train, shard_cfg)]
            rates = loader_rates([epochs_of(*pair) for pair in loaders], args.repeats)
            print(f"{workers:>8} {rates[0]:>10.0f} {rates[1]:>13.0f} {rates[2]:>8.0f} {rates[2] / rates[0]:>17.2f}")


if __name__ == "__main__":
    main()
