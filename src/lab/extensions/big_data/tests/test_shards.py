"""data=shards: prepared from an image folder or tensors, read by index; every sample once per epoch across ranks and
workers; a training order that resumes by position; one line for each way prepared shards go bad."""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from lab import data
from lab.config import ConfigError, options
from lab.data import prepared
from lab.distributed.parallel import Parallel
from lab.errors import UserError
from lab.extensions.big_data import shards


def write_images(root: Path, per_class: int = 7, classes: tuple[str, ...] = ("a", "b", "c")) -> Path:
    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", 2)):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.{'jpg' if i % 3 == 0 else 'png'}")
    return root


def option(**keys):
    return options.instantiate("data", {"name": "shards", "image_size": 8, **keys})


@pytest.fixture
def images(tmp_path):
    return write_images(tmp_path / "images")


def test_shards_of_an_image_folder_hold_its_splits_and_pixels(images, tmp_path):
    cfg = option(source=str(images), path=str(tmp_path / "shards"), samples_per_shard=4, augment=False)
    cfg.prepare()
    module = cfg.build()
    folder = {"name": "image_folder", "root": str(images), "image_size": 8, "augment": False}
    reference = options.instantiate("data", folder).build()
    assert module.meta == reference.meta
    for split in ("train", "val"):
        ours, theirs = getattr(module, split), getattr(reference, split)
        assert len(ours) == len(theirs)
        for i in range(len(ours)):
            x, y = ours[i]
            x_ref, y_ref = theirs[i]
            assert y == y_ref and torch.equal(x, x_ref)  # the file's own bytes: the same decoded pixels
    assert module.test is None
    manifest = json.loads((tmp_path / "shards" / prepared.MANIFEST).read_text())
    assert [p["name"] for p in manifest["parts"]][:2] == ["train-000000.tar", "train-000001.tar"]
    assert json.loads((tmp_path / "shards" / "train.json").read_text())["shardlist"][-1] == {
        "url": "train-000005.tar",
        "nsamples": 1,
    }


def tensor_shards(folder: Path, n: int = 45, per_shard: int = 4) -> Path:
    """Tensor samples whose value is their own index: a loader's batches say which samples they hold."""
    samples = [(np.full((2,), i, dtype=np.float32), i % 3) for i in range(n)]
    shards.prepare_tensors(folder, {"train": samples, "val": samples[:5]}, ["x", "y", "z"], per_shard=per_shard)
    return folder


def epoch_visits(module, world_size: int, workers: int, epoch: int) -> list[int]:
    """The sample indices every rank's training loader yields in `epoch`, all ranks together."""
    cfg = options.instantiate("data", {"name": "shards", "path": "-", "batch_size": 4, "num_workers": workers})
    seen = []
    for rank in range(world_size):
        sampler = Parallel(rank=rank, world_size=world_size).train_sampler(module.train, seed=7)
        generator = torch.Generator().manual_seed(7)
        loader = data.make_loader(module.train, cfg, train=True, generator=generator, pin_memory=False, sampler=sampler)
        for x, _ in data.EpochLoader(loader, generator, 7).epoch(epoch):
            seen += x[:, 0].long().tolist()
    return seen


@pytest.mark.parametrize(("world_size", "workers"), [(1, 0), (1, 2), (2, 0), (2, 2)])
def test_an_epoch_sees_each_sample_once_across_ranks_and_workers(tmp_path, world_size, workers):
    module = shards.build(option(path=str(tensor_shards(tmp_path / "t"))))
    orders = []
    for epoch in (0, 1):
        seen = epoch_visits(module, world_size, workers, epoch)
        counts = Counter(seen)
        assert max(counts.values()) == 1  # never twice
        # dropped: the remainder of 45 over the ranks, then each rank's last partial batch of 4
        per_rank = 45 // world_size
        assert len(seen) == world_size * (per_rank - per_rank % 4)
        orders.append(seen)
    assert orders[0] != orders[1]  # a new order every epoch


def test_the_training_order_is_one_order_cut_into_contiguous_parts_per_rank():
    whole = list(shards.ShardShuffle([4, 4, 4, 3, 4], 0, 1, seed=3, window=2))
    parts = [list(shards.ShardShuffle([4, 4, 4, 3, 4], r, 2, seed=3, window=2)) for r in (0, 1)]
    assert parts[0] + parts[1] == whole[:18] and sorted(whole) == list(range(19))
    # locality: the first 7 samples (the smallest group is 3 + 4) come from the first group's two shards, mixed
    shard_of = {i: int(np.searchsorted([4, 8, 12, 15, 19], i, side="right")) for i in whole}
    assert len({shard_of[i] for i in whole[:7]}) == 2
    assert whole[:7] != sorted(whole[:7])


def test_a_resumed_epoch_continues_the_order_where_it_stopped(tmp_path):
    module = shards.build(option(path=str(tensor_shards(tmp_path / "t"))))
    cfg = options.instantiate("data", {"name": "shards", "path": "-", "batch_size": 4, "num_workers": 2})

    def batches(start):
        sampler = Parallel().train_sampler(module.train, seed=1)
        generator = torch.Generator().manual_seed(1)
        loader = data.make_loader(module.train, cfg, train=True, generator=generator, pin_memory=False, sampler=sampler)
        return [x[:, 0].tolist() for x, _ in data.EpochLoader(loader, generator, 1).epoch(1, start)]

    assert batches(3) == batches(0)[3:]


def test_an_interrupted_prepare_finishes_where_it_stopped(images, tmp_path, monkeypatch):
    straight = option(source=str(images), path=str(tmp_path / "straight"), samples_per_shard=4)
    straight.prepare()
    cfg = option(source=str(images), path=str(tmp_path / "resumed"), samples_per_shard=4)
    real = shards._write_shard
    calls = []

    def fail_third(samples):
        calls.append(len(samples))
        if len(calls) == 3:
            raise KeyboardInterrupt  # as Ctrl-C mid-prepare
        return real(samples)

    monkeypatch.setattr(shards, "_write_shard", fail_third)
    with pytest.raises(KeyboardInterrupt):
        cfg.prepare()
    with pytest.raises(ConfigError, match=r"is a partial prepare \(interrupted: no manifest.json\); run the same"):
        cfg.build()
    monkeypatch.setattr(shards, "_write_shard", real)
    cfg.prepare()
    left = sorted(p.name for p in (tmp_path / "resumed").iterdir())
    assert left == sorted(p.name for p in (tmp_path / "straight").iterdir())  # no temp file, no progress file
    ours = json.loads((tmp_path / "resumed" / prepared.MANIFEST).read_text())["parts"]
    theirs = json.loads((tmp_path / "straight" / prepared.MANIFEST).read_text())["parts"]
    assert [(p["name"], p["sha256"]) for p in ours] == [(p["name"], p["sha256"]) for p in theirs]


def test_prepare_never_mixes_with_or_overwrites_other_data(images, tmp_path):
    out = tmp_path / "shards"
    option(source=str(images), path=str(out), samples_per_shard=4).prepare()
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    option(source=str(images), path=str(out), samples_per_shard=4).prepare()  # up to date: nothing written
    with pytest.raises(ConfigError, match=r"already holds data prepared from .* with other settings; choose another"):
        option(source=str(images), path=str(out), samples_per_shard=5).prepare()
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not empty and was not written by a prepare"):
        option(source=str(images), path=str(mine)).prepare()
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def break_by(kind: str, folder: Path, source: Path) -> str:
    if kind == "truncated shard":
        shard = folder / "train-000001.tar"
        shard.write_bytes(shard.read_bytes()[:700])
        return r"is damaged: train-000001.tar has 700 bytes, the manifest says \d+; restore it"
    if kind == "missing index":
        (folder / "train.json").unlink()
        return "is damaged: train.json is missing"
    if kind == "missing manifest":
        (folder / prepared.MANIFEST).unlink()
        return "has no manifest.json, so it is not prepared data; prepare it with: python scripts/prepare_data.py"
    if kind == "changed source":
        (source / "train" / "a" / "new.png").write_bytes((source / "train" / "a" / "1.png").read_bytes())
        return "is stale: .* has changed since it was prepared; prepare it again into a new folder"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["truncated shard", "missing index", "missing manifest", "changed source"])
def test_bad_prepared_shards_are_refused_in_one_line(images, tmp_path, kind):
    cfg = option(source=str(images), path=str(tmp_path / "shards"), samples_per_shard=4)
    cfg.prepare()
    message = break_by(kind, tmp_path / "shards", images)
    with pytest.raises(ConfigError, match=message) as err:
        cfg.build()
    assert "\n" not in str(err.value)


def test_a_shard_cut_short_or_of_another_schema_is_one_line_when_read(tmp_path):
    folder = tensor_shards(tmp_path / "t", n=8)
    module = shards.build(option(path=str(folder)))
    with tarfile.open(folder / "train-000001.tar") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    # a shard whose tar lost its last sample (an index or copy gone wrong, sizes not checked: a foreign source)
    with tarfile.open(folder / "train-000001.tar", "w") as tar:
        for member, content in members[:-2]:
            tar.addfile(member, io.BytesIO(content))
    with pytest.raises(UserError, match=r"holds 3 samples, its index says 4: truncated or replaced"):
        module.train[7]
    # samples without the member data=shards reads
    module.train.shards.open.clear()
    with tarfile.open(folder / "train-000001.tar", "w") as tar:
        for member, content in members:
            if member.name.endswith(".npy"):
                member.name = member.name.replace(".npy", ".txt")
            tar.addfile(member, io.BytesIO(content))
    with pytest.raises(UserError, match=r"has no .npy tensor member, only \['.cls', '.txt'\]"):
        module.train[4]


def test_the_device_loader_is_refused_for_shards():
    with pytest.raises(ConfigError, match=r"data.loader=device holds a whole split on the device: set data.loader"):
        option(path="-", loader="device")
