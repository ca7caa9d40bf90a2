"""A mid-epoch resume starts the training sampler at its batch: nothing before it is loaded, and what follows is
exactly what an uninterrupted epoch gives there (augmentation included, with or without workers)."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, Dataset

from lab.config import DataConfig
from lab.data.loaders import EpochLoader, make_loader


class Counted(Dataset):
    """Items draw from the RNG (as random augmentation does) and count every sample fetched."""

    def __init__(self, n: int = 40) -> None:
        self.n, self.loaded = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.loaded += 1
        return torch.rand(1), index


def epoch_loader(dataset: Dataset, workers: int = 0) -> EpochLoader:
    cfg = OmegaConf.structured(DataConfig(batch_size=4, num_workers=workers))
    generator = torch.Generator().manual_seed(7)
    return EpochLoader(make_loader(dataset, cfg, train=True, generator=generator, pin_memory=False), generator, 7)


def test_a_resume_loads_only_the_batches_it_trains_on() -> None:
    dataset = Counted()
    loader = epoch_loader(dataset)
    full = [index.tolist() for _, index in loader.epoch(1)]
    dataset.loaded = 0
    resumed = [index.tolist() for _, index in loader.epoch(1, start=3)]
    assert resumed == full[3:] and len(full) == 10
    assert dataset.loaded == 7 * 4  # batches 0-2 were never fetched
    # a loader not built by make_loader still resumes right, by drawing and dropping
    plain = EpochLoader(DataLoader(Counted(), batch_size=4, drop_last=True), None, seed=0)
    assert [i.tolist() for _, i in plain.epoch(0, start=3)] == [i.tolist() for _, i in plain.epoch(0)][3:]


def test_with_workers_a_batch_draws_by_its_position_not_by_its_worker() -> None:
    # batch 2 goes to worker 0 when the epoch starts there, to worker 0 or 1 in a full epoch: its draws must not care
    two = epoch_loader(Counted(), workers=2)
    full = [x.flatten().tolist() for x, _ in two.epoch(1)]
    assert [x.flatten().tolist() for x, _ in two.epoch(1, start=3)] == full[3:]
    assert [x.flatten().tolist() for x, _ in epoch_loader(Counted(), workers=1).epoch(1)] == full
    assert len({tuple(batch) for batch in full}) == len(full)  # fresh draws for every batch
