"""data.loader=device: the same batches as the DataLoader path, augmentation on the device, exact resume, refusals."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DistributedSampler, Subset, TensorDataset

from helpers import in_process_trainer
from lab import checkpointing, data, models, tasks
from lab.data import DataModule, DeviceEvalLoader, DeviceLoader, EpochLoader, make_loader
from lab.data.options import DigitsConfig, TextConfig
from lab.distributed.parallel import ShardSampler
from lab.errors import UserError
from lab.runtime import epoch_generator_seed
from lab.workflows.train import run

CPU = torch.device("cpu")


def cfg(**overrides):
    return OmegaConf.structured(DigitsConfig(**overrides))


@pytest.fixture(scope="module")
def digits() -> DataModule:
    return data.build(cfg(batch_size=32))


@pytest.fixture(scope="module")
def augmented() -> DataModule:
    return data.build(cfg(batch_size=32, augment=True))


def torch_batches(dataset, seed: int, epoch: int, rank: int = 0, world_size: int = 1) -> list:
    """Training's DataLoader path, built as the train workflow builds it."""
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=epoch_generator_seed(seed, 0)
    )
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    loader = make_loader(
        dataset, cfg(batch_size=32), train=True, generator=generator, pin_memory=False, sampler=sampler
    )
    return list(EpochLoader(loader, generator, seed * 1000 + rank).epoch(epoch))


def device_loader(
    dataset, seed: int = 3, rank: int = 0, world_size: int = 1, batch_size: int = 32, limit: int = -1
) -> DeviceLoader:
    return DeviceLoader(
        dataset,
        cfg(batch_size=batch_size),
        CPU,
        seed=seed,
        augment_seed=seed * 1000 + rank,
        rank=rank,
        world_size=world_size,
        limit=limit,
    )


@pytest.mark.parametrize("world_size", [1, 2])
def test_without_augmentation_the_batches_are_the_dataloaders(digits: DataModule, world_size: int) -> None:
    # the same permutation, padding and rank striding as DistributedSampler: dist=ddp sees what one process sees
    for rank in range(world_size):
        loader = device_loader(digits.train, rank=rank, world_size=world_size)
        for epoch in (0, 1):
            expected = torch_batches(digits.train, 3, epoch, rank, world_size)
            got = list(loader.epoch(epoch))
            assert len(got) == len(expected) == len(loader) == len(digits.train) // world_size // 32
            for (x, y), (ex, ey) in zip(got, expected):
                assert torch.equal(x, ex) and torch.equal(y, ey)


def test_tables_and_eval_order_match_the_dataloader() -> None:
    table = data.build(OmegaConf.create({"name": "diabetes", "batch_size": 16}))
    val = DeviceEvalLoader(table.val, 10, CPU, ShardSampler(len(table.val), 1, 2), "val")
    loader = make_loader(
        table.val,
        cfg(batch_size=10),
        train=False,
        generator=None,
        pin_memory=False,
        sampler=ShardSampler(len(table.val), 1, 2),
    )
    assert len(val) == len(loader) and val.sampler.num_valid == loader.sampler.num_valid
    for (x, y), (ex, ey) in zip(val, loader, strict=True):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def shifts_of(source: torch.Tensor, padding: int) -> list[torch.Tensor]:
    padded = torch.nn.functional.pad(source, (padding,) * 4)
    size = source.shape[-1]
    return [padded[..., i : i + size, j : j + size] for i in range(2 * padding + 1) for j in range(2 * padding + 1)]


def test_augmentation_is_a_random_shift_seeded_by_epoch_and_position(augmented: DataModule) -> None:
    loader = device_loader(augmented.train)
    plain = copy.copy(augmented.train)
    plain.augment = None
    order = loader.order(1)[:32]
    x, y = next(loader.epoch(1))
    # digits: RandomCrop(8, padding=1), no flip; padding is black (0 before normalization)
    unit = plain.images[order].float() / plain.scale
    raw = x * plain.std.view(-1, 1, 1) + plain.mean.view(-1, 1, 1)
    for i in range(32):
        assert min(float((raw[i] - s).abs().max()) for s in shifts_of(unit[i], 1)) < 1e-5
    assert not torch.equal(x, plain.fetch(order)[0])  # something moved
    assert torch.equal(y, plain.labels[order])
    # a fresh loader, a resumed start, and another epoch or rank
    first = list(loader.epoch(1))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, list(device_loader(augmented.train).epoch(1))))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first[5:], list(loader.epoch(1, start=5)), strict=True))
    assert not torch.equal(next(loader.epoch(2))[0], first[0][0])
    other_rank = DeviceLoader(augmented.train, cfg(batch_size=32), CPU, seed=3, augment_seed=3001)
    assert not torch.equal(next(other_rank.epoch(1))[0], first[0][0])  # same order, other draws


def test_token_windows_start_at_random_offsets_inside_their_blocks() -> None:
    text = data.build(OmegaConf.structured(TextConfig(max_chars=20_000, block_size=16, batch_size=8)))
    ids = text.train.ids
    loader = device_loader(text.train, batch_size=8)
    x, y = next(loader.epoch(0))
    assert x.shape == y.shape == (8, 16) and torch.equal(x[:, 1:], y[:, :-1])
    # row i is a window of the corpus starting inside block order[i] (the DataLoader path starts on its boundary)
    starts = [
        next(s for s in range(16 * b, 16 * b + 16) if torch.equal(ids[s : s + 16], row))
        for row, b in zip(x, loader.order(0)[:8].tolist(), strict=True)
    ]
    assert any(s % 16 for s in starts)
    assert torch.equal(next(device_loader(text.train, batch_size=8).epoch(0))[0], x)


def test_limit_and_overfit_subsets(digits: DataModule) -> None:
    assert len(device_loader(digits.train, limit=3)) == len(list(device_loader(digits.train, limit=3).epoch(0))) == 3
    subset = Subset(digits.train, range(64))  # trainer.overfit_batches=2
    loader = device_loader(subset)
    rows = torch.cat([x for x, _ in loader.epoch(0)])
    assert sorted(loader.order(0).tolist()) == list(range(64))  # rows of the parent split, each once
    assert torch.equal(rows, digits.train.fetch(loader.order(0))[0])


def test_what_cannot_live_on_the_device_is_refused_in_one_line(digits: DataModule, monkeypatch) -> None:
    with pytest.raises(UserError, match=r"TensorDataset\) is not held in memory as tensors .*data\.loader=torch"):
        device_loader(TensorDataset(torch.zeros(64, 2)))
    custom = copy.copy(digits.train)
    custom.augment = lambda x: x
    with pytest.raises(UserError, match=r"cannot run this dataset's augmentation \(function\).*data\.loader=torch"):
        device_loader(custom)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100_000, 10**9))  # 100 kB free
    with pytest.raises(UserError, match=r"the train split needs 0.00 GiB but cuda:0 has .*use data\.loader=torch"):
        DeviceLoader(digits.train, cfg(batch_size=32), torch.device("cuda:0"), seed=0, augment_seed=0)


@pytest.mark.parametrize("loader", ["device", "torch"])
def test_an_augmented_run_resumed_mid_epoch_ends_bitwise_equal(tmp_path: Path, compose, augmented, loader) -> None:
    # torch: no workers, so augmentation draws from the global RNG the checkpoint restores; a resume that replayed
    # the epoch's first batches would draw them again and train on other crops
    config = compose(["model=mlp", "model.hidden_dims=[32]", "data.augment=true", "trainer.progress_bar=off"])
    meta, task = augmented.meta, tasks.build(config.task, augmented.meta)

    def batches():  # 8 batches of 32 per epoch
        if loader == "device":
            return device_loader(augmented.train, limit=8)
        generator = torch.Generator().manual_seed(3)
        train = make_loader(augmented.train, cfg(batch_size=32), train=True, generator=generator, pin_memory=False)
        return EpochLoader(train, generator, seed=3, limit=8)

    def trainer(name: str, max_steps: int = -1):
        torch.manual_seed(0)
        run_config = copy.deepcopy(config)
        run_config.trainer.max_epochs, run_config.trainer.max_steps = 2, max_steps
        # in_process_trainer wraps a DataLoader-like list in an EpochLoader: swapped for the loader under test
        out = in_process_trainer(run_config, models.build(config.model, meta), task, [None], tmp_path / name, 16)
        out.train_batches = batches()
        return out

    straight = trainer("straight")
    straight.fit()
    first = trainer("first", max_steps=8 + 3)  # stops in epoch 2, batch 3
    first.fit()
    resumed = trainer("resumed")
    resumed.resume(checkpointing.read(tmp_path / "first" / "checkpoints" / "last.pt"))
    assert resumed.progress.batch_in_epoch == 3
    resumed.fit()
    for t in (straight, first, resumed):
        t.tracker.finish()
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.integration  # starts git (the run records its provenance)
def test_a_device_run_trains_and_scores_like_a_dataloader_run(tmp_path: Path, compose) -> None:
    # the train workflow end to end, with accumulation (a short last group too) and a batch limit: the same batches
    # (no augmentation) give the same weights, and val/test through the device path give the same metrics
    common = [
        "model=mlp",
        "logger=none",
        "trainer.max_epochs=2",
        "trainer.grad_accum_steps=2",
        "trainer.limit_train_batches=7",
    ]
    for loader in ("torch", "device"):
        run(compose([*common, f"data.loader={loader}"]), tmp_path / loader)
    weights = [
        torch.load(tmp_path / n / "checkpoints/last.pt", weights_only=True)["model"] for n in ("torch", "device")
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    summaries = [json.loads((tmp_path / n / "summary.json").read_text()) for n in ("torch", "device")]
    metrics = [{k: v for k, v in s.items() if k.startswith(("val/", "test/"))} for s in summaries]
    assert metrics[0] == metrics[1] and "test/acc" in metrics[0]
