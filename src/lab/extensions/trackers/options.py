"""The trackers this extension adds: `logger=tensorboard` and `logger=mlflow`, each a ``TrackerConfig``.

This module is imported at every start, so it imports no torch and no tracker; ``backend()`` imports the class
when the tracker is chosen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lab.config.checks import require as _require
from lab.config.trackers import TrackerConfig

if TYPE_CHECKING:
    from lab.tracking.backends import Backend


@dataclass
class TensorboardConfig(TrackerConfig):
    """TensorBoard event files in <run dir>/tensorboard/: metrics as scalars, config and summary as text."""

    requires = ("tensorboard",)

    def backend(self) -> type[Backend]:
        from lab.extensions.trackers.tensorboard_backend import TensorBoardBackend

        return TensorBoardBackend


@dataclass
class MlflowConfig(TrackerConfig):
    """One MLflow run per job, in a store every run shares (mlflow_backend.py).

    The store is SQLite under `paths.outputs` by default, or a tracking server. When the keys are null,
    MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME are honoured."""

    # mlflow-skinny is the client without the UI server; its SQLite store needs sqlalchemy and alembic undeclared
    requires = ("mlflow-skinny", "sqlalchemy", "alembic")

    # null: $MLFLOW_TRACKING_URI, else sqlite:///<paths.outputs>/mlflow/mlflow.db, with artifacts beside it
    tracking_uri: str | None = None
    experiment: str | None = None  # null: $MLFLOW_EXPERIMENT_NAME, else "lab", wandb's default project
    timeout: float = 10.0  # seconds for a tracking server to answer before the run is refused

    def __post_init__(self) -> None:
        if self.tracking_uri:
            from lab.extensions.trackers.mlflow_backend import mlflow_uri_problem  # imports no mlflow, no torch

            problem = mlflow_uri_problem(self.tracking_uri)
            _require(problem is None, f"{self.key_of('tracking_uri')}={self.tracking_uri!r}: {problem}")
        _require(self.experiment != "", f"{self.key_of('experiment')} is empty: name an experiment, or null")
        _require(self.timeout > 0, f"{self.key_of('timeout')} must be > 0, got {self.timeout}")

    def backend(self) -> type[Backend]:
        from lab.extensions.trackers.mlflow_backend import MlflowBackend

        return MlflowBackend
