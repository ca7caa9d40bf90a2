"""The `cv` node: `cv.folds`, `cv.fold`, `cv.seed`, `cv.stratify`. No torch here (imported at every start)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import TrainNodeConfig
from lab.config.checks import require, seed
from lab.sweeps import in_multirun


@dataclass
class CvConfig(TrainNodeConfig):
    """k-fold cross-validation of the train+val pool; the test split stays out of every fold."""

    folds: int = 0  # K: a sweep runs each parameter set once per fold; 0 = off
    fold: int | None = None  # this job's fold, 0..K-1: set by the sweep, one job per fold
    seed: int = 0  # which samples go to which fold, independent of the training seed and data.split_seed
    stratify: bool | None = None  # keep each class's share in every fold; null = when the data has classes

    def __post_init__(self) -> None:
        require(self.folds == 0 or self.folds >= 2, f"cv.folds={self.folds}: 0 (off) or a number of folds >= 2")
        require(
            self.fold is None or 0 <= self.fold < self.folds,
            f"cv.fold={self.fold} is not a fold of cv.folds={self.folds}; choose 0..{self.folds - 1} or leave it unset",
        )
        seed("cv.seed", self.seed)
        # A fold is a job of its own (own run dir, resume, summary row): the sweep layer runs them. A single run
        # would train one fold and call it cross-validated. A sweeper's process has no HydraConfig: not refused.
        require(
            not self.folds or self.fold is not None or not _single_run(),
            f"cv.folds={self.folds} needs a multirun, one job per fold: add -m (python scripts/train.py -m "
            f"cv.folds={self.folds})",
        )

    def sweep_parts(self) -> tuple[str, int] | None:
        return ("cv.fold", self.folds) if self.folds and self.fold is None else None

    def pool_splitter(self, run_dir: Any) -> Any:
        if not self.folds:
            return None
        from lab.extensions.cv.folds import FoldSplit

        return FoldSplit(self.folds, self._fold(), self.seed, self.stratify, Path(run_dir))

    def _fold(self) -> int:
        require(
            self.fold is not None,
            f"cv.folds={self.folds} but this job has no cv.fold: its sweeper did not make one job per fold; use the "
            "default grid sweeper or hparams_search=optuna",
        )
        assert self.fold is not None  # require raised otherwise
        return self.fold


def _single_run() -> bool:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.initialized() and not in_multirun()
