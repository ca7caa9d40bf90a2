"""k-fold splits of the train+val pool, and the record of a job's fold (fold.json in its run dir)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab import files
from lab.errors import ConfigError

RECORD = "fold.json"


def fold_of(labels: np.ndarray, folds: int, seed: int, stratify: bool) -> np.ndarray:
    """Return each sample's fold, 0..folds-1: a seeded shuffle dealt round-robin, class by class when `stratify`.

    Dealing continues across classes, so every fold gets floor or ceil of each class's count / folds, and the folds'
    sizes differ by one at most."""
    if len(labels) < folds:
        raise ConfigError(f"cv.folds={folds} is more than the {len(labels)} samples of the train+val pool")
    rng = np.random.RandomState(seed)
    groups = np.unique(labels, return_inverse=True)[1] if stratify else np.zeros(len(labels), np.int64)
    assigned = np.empty(len(labels), np.int64)
    dealt = 0
    for group in range(groups.max() + 1):
        members = np.flatnonzero(groups == group)
        assigned[members[rng.permutation(len(members))]] = (dealt + np.arange(len(members))) % folds
        dealt += len(members)
    return assigned


@dataclass(frozen=True)
class FoldSplit:
    """Split a pool into fold `fold`'s (train, val) indices, recording them in `run_dir`/fold.json."""

    folds: int
    fold: int
    seed: int
    stratify: bool | None
    run_dir: Path

    def __str__(self) -> str:
        return f"cv.folds={self.folds}"  # what a refusal names (lab.workflows.train)

    def __call__(self, labels: Any, pool: Any) -> tuple[Any, Any]:
        import torch

        strata = labels[pool].numpy()
        stratify = len(np.unique(strata)) > 1 if self.stratify is None else self.stratify
        in_val = fold_of(strata, self.folds, self.seed, stratify) == self.fold
        pool = pool.numpy()
        train, val = np.sort(pool[~in_val]), np.sort(pool[in_val])
        self.record(train, val, stratify, len(labels))
        return torch.from_numpy(train), torch.from_numpy(val)

    def record(self, train: np.ndarray, val: np.ndarray, stratified: bool, n: int) -> None:
        digest = hashlib.sha256(np.concatenate([train, [-1], val]).astype(np.int64).tobytes()).hexdigest()
        files.write_json(
            self.run_dir / RECORD,
            {
                "fold": self.fold,
                "folds": self.folds,
                "seed": self.seed,
                "stratified": stratified,
                "samples": n,  # the dataset's; the test split is what neither list holds
                "sha256": digest,  # of train, -1, val as int64: compare folds without reading the lists
                "train": train.tolist(),
                "val": val.tolist(),
            },
        )
