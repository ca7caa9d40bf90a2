"""``data=shards``: samples in WebDataset tar shards, read by index.

Reading by index lets a data set larger than memory train like one in memory: the same samplers, workers, DDP
split and bitwise mid-epoch resume (lab.data.loaders).

A shard is a plain tar with one sample per key, e.g. ``000042.png`` + ``000042.cls`` (tensors are ``.npy``). Any
tar tool can read it. ``scripts/prepare_data.py data=shards`` writes an image folder's splits into
``<split>-NNNNNN.tar`` shards of ``data.samples_per_shard`` samples, keeping each image's file bytes as they are.
Each split also gets an index, ``<split>.json`` (wids' shard list), and prepared.py writes the manifest.
:func:`write_shards` writes tensor samples the same way.

wids' ``IndexedTarSamples`` memory-maps a shard and indexes its tar headers, so sample i is a bisect into the shard
list plus a slice of a mapped file. Each process keeps the last ``data.open_shards`` shards open.

The training order (:class:`ShardShuffle`) keeps locality. Each epoch the shards are shuffled and cut into groups
of ``data.shuffle_shards``, and each group's samples are shuffled together. Rank r reads the r-th contiguous part
of that order, so it touches few shards at a time. An epoch sees every sample once, except up to world_size - 1
samples at the end of the order and each rank's dropped last partial batch; these change every epoch.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import logging
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Sampler

from lab.data import prepared
from lab.data.common import DataModule, OrderedDataset, resolve_num_classes
from lab.data.folder import folder_splits, image_pipeline
from lab.errors import ConfigError, UserError
from lab.extensions.big_data.options import ShardsConfig

log = logging.getLogger(__name__)

KIND = "shards"
SPLITS = ("train", "val", "test")
IMAGE_EXTS = (".png", ".jpg", ".jpeg")
TENSOR_EXT = ".npy"
LABEL_EXT = ".cls"


def command(cfg: ShardsConfig) -> str:
    return (
        f"python scripts/prepare_data.py data=shards data.source={cfg.source or '<image folder>'} data.path={cfg.path}"
    )


# --------------------------------------------------------------------------- writing
def _write_shard(samples: list[dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
    def write(tmp: Path) -> dict[str, Any]:
        import webdataset  # the format's own writer, so every reader accepts the result

        with open(tmp, "wb") as stream:
            # a fixed member time, so the same samples always make the same bytes and checksum
            writer = webdataset.TarWriter(stream, mtime=0)
            for sample in samples:
                writer.write(sample)
            writer.close()
        return {"nsamples": len(samples)}

    return write


def write_shards(
    preparer: prepared.Preparer,
    split: str,
    samples: list[Callable[[], dict[str, Any]]],
    per_shard: int,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Write one split as shards of `per_shard` samples plus its index ``<split>.json``; return the shard list.

    `samples` are callables that make a sample dict, like ``{"png": bytes, "cls": 3}``. They are called only for
    shards not written yet, so a resumed prepare rereads nothing it already wrote."""
    shards = []
    for number, start in enumerate(range(0, len(samples), per_shard)):
        name = f"{split}-{number:06d}.tar"
        chunk = range(start, min(start + per_shard, len(samples)))
        if not preparer.done(name):
            made = [{"__key__": f"{i:09d}", **samples[i]()} for i in chunk]
            preparer.add(name, _write_shard(made))
        shards.append({"url": name, "nsamples": len(chunk)})
        if progress is not None:
            progress.update(len(chunk))
    index = {"wids_version": 1, "name": split, "shardlist": shards}  # wids' ShardListDataset reads this too

    def write_index(tmp: Path) -> None:
        tmp.write_text(json.dumps(index, indent=1))

    preparer.add(f"{split}.json", write_index)
    return shards


def _image_sample(path: str, label: int) -> Callable[[], dict[str, Any]]:
    ext = Path(path).suffix.lower().lstrip(".")
    return lambda: {ext: Path(path).read_bytes(), "cls": label}  # the raw file bytes, so the pixels are unchanged


def _tensor_sample(array: np.ndarray, label: int) -> Callable[[], dict[str, Any]]:
    return lambda: {"npy": np.asarray(array), "cls": int(label)}


def prepare(cfg: ShardsConfig) -> None:
    """Write the image folder data.source as shards in data.path (scripts/prepare_data.py data=shards)."""
    from tqdm import tqdm

    if cfg.source is None:
        raise ConfigError(f"data.source is required to prepare shards: the image folder to read; {command(cfg)}")
    source = Path(cfg.source).expanduser()
    try:
        class_names, splits = folder_splits(cfg, source)
    except ConfigError as err:
        raise ConfigError(f"data.source={cfg.source}: {err}") from None
    params = {
        "samples_per_shard": cfg.samples_per_shard,
        "val_fraction": cfg.val_fraction,
        "split_seed": cfg.split_seed,
    }
    preparer = prepared.Preparer(cfg.path, KIND, params, source, command(cfg))
    if preparer.up_to_date:
        log.info("%s is already prepared from %s: nothing to do", cfg.path, cfg.source)
        return
    present = {split: samples for split, samples in splits.items() if samples}
    info: dict[str, Any] = {"sample": "image", "class_names": class_names, "splits": {}}
    with tqdm(total=sum(len(s) for s in present.values()), unit="img", desc=f"shards -> {cfg.path}") as bar:
        for split, samples in present.items():
            makers = [_image_sample(path, label) for path, label in samples]
            info["splits"][split] = write_shards(preparer, split, makers, cfg.samples_per_shard, bar)
    preparer.finish(info)
    log.info("prepared %s: %s", cfg.path, {s: sum(x["nsamples"] for x in v) for s, v in info["splits"].items()})


# --------------------------------------------------------------------------- reading
class OpenShards:
    """Keep up to `size` shards open in this process, closing the least recently used.

    The open shards are not pickled: a memory map belongs to one process, so each DataLoader worker opens its
    own."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.open: OrderedDict[Path, Any] = OrderedDict()

    def get(self, path: Path, nsamples: int) -> Any:
        shard = self.open.get(path)
        if shard is None:
            shard = self.open[path] = _open(path, nsamples)
            while len(self.open) > self.size:
                self.open.popitem(last=False)[1].close()
        self.open.move_to_end(path)
        return shard

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size, "open": OrderedDict()}


def _open(path: Path, nsamples: int) -> Any:
    from wids.wids import IndexedTarSamples

    try:
        shard = IndexedTarSamples(path=str(path))
    except FileNotFoundError:
        raise UserError(f"shard {path} is missing; restore it, or prepare the data again") from None
    except (struct.error, ValueError, UnicodeDecodeError, OSError) as err:
        raise UserError(f"shard {path} is not a readable tar ({err}): damaged or truncated; prepare again") from None
    if len(shard) != nsamples:
        shard.close()
        raise UserError(
            f"shard {path} holds {len(shard)} samples, its index says {nsamples}: truncated or replaced; restore it, "
            "or prepare the data again"
        )
    return shard


class ShardsDataset(OrderedDataset):
    """One split's samples, read from its shards by index.

    `decode` turns a sample's members (``{".png": file, ".cls": file}``) into what the model gets. Like
    data=image_folder, an undecodable sample is replaced by the next one with a warning, up to `max_bad` times
    per process."""

    def __init__(
        self,
        where: Callable[[str], Path],
        shards: list[dict[str, Any]],
        decode: Callable[[dict], Any],
        cfg: ShardsConfig,
    ) -> None:
        self.where, self.decode, self.max_bad, self.bad = where, decode, cfg.max_bad_samples, 0
        self.window = cfg.shuffle_shards
        self.names = [s["url"] for s in shards]
        self.lengths = [int(s["nsamples"]) for s in shards]
        self.ends = np.cumsum(self.lengths).tolist()
        self.shards = OpenShards(cfg.open_shards)

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def locate(self, index: int) -> tuple[int, int]:
        """Return (shard number, position in that shard) of sample `index`."""
        shard = bisect.bisect_right(self.ends, index)
        return shard, index - (self.ends[shard - 1] if shard else 0)

    def __getitem__(self, index: int) -> Any:
        shard, inner = self.locate(index)
        path = self.where(self.names[shard])
        members = self.shards.get(path, self.lengths[shard])[inner]
        try:
            return self.decode(members)
        except UserError:
            raise
        except (OSError, ValueError, SyntaxError) as err:  # what PIL and numpy raise for damaged members
            self.bad += 1
            if self.bad > self.max_bad:
                raise UserError(
                    f"cannot decode sample {members['__key__']} of {path}: {err} ({self.bad - 1} skipped before it; "
                    "prepare the data again, or set data.max_bad_samples=N to skip up to N)"
                ) from None
            log.warning("skipped undecodable sample %s of %s", members["__key__"], path)
            return self[(index + 1) % len(self)]

    def train_sampler(self, rank: int, world_size: int, seed: int) -> ShardShuffle:
        """Return the training order; lab.distributed.Parallel.train_sampler asks for it."""
        return ShardShuffle(self.lengths, rank, world_size, seed, self.window)


class ShardShuffle(Sampler[int]):
    """One rank's training order of a sharded split, as the module docstring describes.

    The order depends only on (seed, epoch), so :class:`lab.data.loaders.EpochSampler` can resume mid-epoch by
    position. It holds one group of shards' indices in memory."""

    def __init__(self, lengths: list[int], rank: int, world_size: int, seed: int, window: int) -> None:
        self.lengths, self.seed, self.window = lengths, seed, window
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self.per_rank = sum(lengths) // world_size
        self.begin = rank * self.per_rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.per_rank

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        position, end = 0, self.begin + self.per_rank
        for first in range(0, len(order), self.window):
            group = order[first : first + self.window]
            size = int(sum(self.lengths[s] for s in group))
            if position + size > self.begin:  # this rank's part starts in or before this group
                indices = np.concatenate([self.starts[s] + np.arange(self.lengths[s]) for s in group])
                indices = rng.permutation(indices)
                lo, hi = max(self.begin - position, 0), min(end - position, size)
                yield from indices[lo:hi].tolist()
            else:
                rng.permutation(size)  # draw as the ranks reading this group do, so all ranks share one order
            position += size
            if position >= end:
                return


class ImageSample:
    """Decode a sample into (its image through `transform`, its label)."""

    def __init__(self, transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.transform = transform

    def __call__(self, members: dict[str, Any]) -> tuple[torch.Tensor, int]:
        image = next((members[ext] for ext in IMAGE_EXTS if ext in members), None)
        with Image.open(_member(members, image, ".png/.jpg image")) as img:
            return self.transform(img), _label(members)


def tensor_sample(members: dict[str, Any]) -> tuple[torch.Tensor, int]:
    array = np.load(_member(members, members.get(TENSOR_EXT), ".npy tensor"), allow_pickle=False)
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)), _label(members)


def _member(members: dict[str, Any], found: io.BytesIO | None, what: str) -> io.BytesIO:
    if found is None:
        present = sorted(k for k in members if not k.startswith("__"))
        raise UserError(
            f"sample {members['__key__']} has no {what} member, only {present}: the shards do not hold the samples "
            "data=shards reads; prepare them with scripts/prepare_data.py data=shards"
        )
    return found


def _label(members: dict[str, Any]) -> int:
    return int(_member(members, members.get(LABEL_EXT), ".cls label").read())


def is_url(path: str) -> bool:
    return "://" in path or path.startswith("pipe:")


class Local:
    """Locate a shard of a prepared folder on this machine."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, name: str) -> Path:
        return self.folder / name


class Remote:
    """Fetch a shard of prepared data on a server into the node's cache and return its local path.

    URLs can be ``https://``, ``s3://``, ``gs://`` or ``pipe:``. wids' downloaders fetch each shard whole on first
    use, under a file lock, so a node fetches it once. A shard must match the manifest's size. A short one, such as
    an interrupted download or an error page, is fetched once more, then refused."""

    def __init__(self, url: str, cache: Path, parts: list[dict[str, Any]]) -> None:
        self.url, self.cache = url.rstrip("/"), cache
        self.parts = {part["name"]: part for part in parts}

    @staticmethod
    def fetch(url: str, local: Path) -> None:
        from wids.wids_dl import download_file

        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            download_file(url, str(local))
        except (AssertionError, OSError, ValueError) as err:  # wids asserts when a download command fails
            raise UserError(f"cannot fetch {url} ({err}); check data.path and this machine's access to it") from None

    def __call__(self, name: str) -> Path:
        from wids.wids_dl import download_and_open

        local = self.cache / name
        for attempt in (1, 2):
            try:
                download_and_open(f"{self.url}/{name}", str(local)).close()
            except (AssertionError, OSError) as err:
                raise UserError(f"cannot fetch {self.url}/{name} ({err}); check the server and the network") from None
            try:
                prepared.check_part(local, self.parts[name], self.url)
                return local
            except ConfigError as err:
                local.unlink(missing_ok=True)  # our own download, so safe to delete
                if attempt == 2:
                    raise UserError(f"fetching {self.url}/{name}: {err}") from None
        raise AssertionError("unreachable")


def read_manifest(cfg: ShardsConfig) -> dict[str, Any]:
    """Read the manifest of the prepared folder data.path; a missing, partial, stale or damaged one is refused."""
    if is_url(cfg.path):
        raise ConfigError(f"data.path={cfg.path} is on a server: check its files where they are a folder")
    return prepared.read_manifest(cfg.path, KIND, command(cfg), cfg.source)


def locate(cfg: ShardsConfig) -> tuple[Callable[[str], Path], dict[str, Any]]:
    """Return (a function that locates each shard, the manifest) for data.path, a prepared folder or a URL."""
    if not is_url(cfg.path):
        return Local(Path(cfg.path).expanduser()), read_manifest(cfg)
    cache = Path(cfg.cache_dir).expanduser() / hashlib.sha256(cfg.path.encode()).hexdigest()[:16]
    Remote.fetch(f"{cfg.path.rstrip('/')}/{prepared.MANIFEST}", cache / prepared.MANIFEST)  # always: it may change
    manifest = prepared.read_manifest(cache, KIND, command(cfg), cfg.source, fetched_from=cfg.path)
    return Remote(cfg.path, cache, manifest["parts"]), manifest


def build(cfg: ShardsConfig) -> DataModule:
    where, manifest = locate(cfg)
    info = manifest["info"]
    class_names = list(info["class_names"])
    resolve_num_classes(cfg, f"the shards in {cfg.path}", len(class_names))
    if info["sample"] == "image":
        meta, train_tf, evaluate = image_pipeline(cfg, class_names)
        decoders: tuple[Callable, Callable] = (ImageSample(train_tf), ImageSample(evaluate))
    else:
        meta = {
            "input_shape": list(info["input_shape"]),
            "num_outputs": len(class_names),
            "num_classes": len(class_names),
            "class_names": class_names,
        }
        decoders = (tensor_sample, tensor_sample)

    def split(name: str, decode: Callable) -> ShardsDataset | None:
        shards = info["splits"].get(name)
        return None if not shards else ShardsDataset(where, shards, decode, cfg)

    train, val = split("train", decoders[0]), split("val", decoders[1])
    if train is None or val is None:
        raise ConfigError(f"data.path={cfg.path} has no {'train' if train is None else 'val'} shards; {command(cfg)}")
    return DataModule(train=train, val=val, test=split("test", decoders[1]), meta=meta)


def prepare_tensors(
    out: str | Path,
    splits: dict[str, Iterable[tuple[np.ndarray, int]] | list],
    class_names: list[str],
    per_shard: int = 1000,
    source: str | Path | None = None,
) -> dict[str, Any]:
    """Write shards of tensor samples ``(array, label)`` per split, which data=shards reads like prepared images.

    Use it for a fork's own data, such as features or spectrograms. ``train`` and ``val`` are required. `source` is
    the file or folder the samples came from; when it changes, the shards are stale."""
    lists = {name: list(samples) for name, samples in splits.items()}
    shapes = {tuple(np.shape(a)) for samples in lists.values() for a, _ in samples}
    if len(shapes) != 1:
        raise UserError(f"tensor samples must share one shape, got {sorted(shapes)}")
    preparer = prepared.Preparer(
        out, KIND, {"samples_per_shard": per_shard}, source, f"{__name__}.prepare_tensors({str(out)!r}, ...)"
    )
    info: dict[str, Any] = {"sample": "tensor", "class_names": class_names, "input_shape": list(shapes.pop())}
    info["splits"] = {
        name: write_shards(preparer, name, [_tensor_sample(a, y) for a, y in samples], per_shard)
        for name, samples in lists.items()
    }
    return preparer.finish(info)
