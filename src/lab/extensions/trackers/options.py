"""The trackers this extension adds: `logger=tensorboard` and `logger=mlflow` (lab.config.trackers: a tracker is its
option, a ``TrackerConfig``). Imported at every start (lab.config.register): no torch, no tracker here; an option's
``backend()`` imports its class when the tracker is chosen."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from lab.config.checks import require as _require
from lab.config.trackers import TrackerConfig

if TYPE_CHECKING:
    from lab.tracking.backends import Backend


@dataclass
class TensorboardConfig(TrackerConfig):
    """TensorBoard (tensorboard_backend here): event files in <run dir>/tensorboard/ (`tensorboard --logdir outputs`):
    the metrics as scalars, the resolved config, git commit and final summary as text."""

    requires = ("tensorboard",)

    def backend(self) -> type[Backend]:
        from lab.extensions.trackers.tensorboard_backend import TensorBoardBackend

        return TensorBoardBackend


# MLflow's tracking stores by URI scheme (mlflow.tracking._tracking_service.utils): a path or file: (the file
# store), a database (sqlite: the local default; a driver may follow: postgresql+psycopg2), a server, Databricks
MLFLOW_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def mlflow_uri_problem(uri: str) -> str | None:
    """Why `uri` is not an MLflow tracking URI this template can use (None: it is). A plain path is a file store."""
    scheme = uri.partition(":")[0].partition("+")[0].lower() if re.match(r"^[A-Za-z][\w+.-]*:", uri) else ""
    if len(scheme) == 1:  # a Windows drive letter (C:\\runs): a path
        scheme = ""
    if scheme and scheme not in MLFLOW_SCHEMES:
        return (
            f"{scheme}: is not a tracking URI scheme MLflow knows; use sqlite:///<path>/mlflow.db (a local store), "
            "http(s)://<host>:<port> (an MLflow server), postgresql|mysql|mssql://... (a database) or databricks"
        )
    if scheme in ("http", "https") and not urlparse(uri).hostname:
        return f"{uri} names no host; write it as {scheme}://<host>:<port>"
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        return "a SQLite URI has three slashes before its path: sqlite:///relative/mlflow.db, sqlite:////absolute.db"
    return None


@dataclass
class MlflowConfig(TrackerConfig):
    """MLflow (mlflow_backend here): one MLflow run per job in a store every run shares, by default a SQLite database
    under `paths.outputs` (`mlflow ui --backend-store-uri sqlite:///outputs/mlflow/mlflow.db` compares them all), or
    a tracking server. MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME are honoured when the keys are null."""

    # mlflow-skinny: the client without the UI's server; its SQLite store needs sqlalchemy and alembic, undeclared
    requires = ("mlflow-skinny", "sqlalchemy", "alembic")

    # null: $MLFLOW_TRACKING_URI, else sqlite:///<paths.outputs>/mlflow/mlflow.db (artifacts beside it in artifacts/)
    tracking_uri: str | None = None
    experiment: str | None = None  # null: $MLFLOW_EXPERIMENT_NAME, else "lab" (wandb's default project)
    timeout: float = 10.0  # seconds for a tracking server to answer before the run is refused

    def __post_init__(self) -> None:
        if self.tracking_uri:
            problem = mlflow_uri_problem(self.tracking_uri)
            _require(problem is None, f"{self.key_of('tracking_uri')}={self.tracking_uri!r}: {problem}")
        _require(self.experiment != "", f"{self.key_of('experiment')} is empty: name an experiment, or null")
        _require(self.timeout > 0, f"{self.key_of('timeout')} must be > 0, got {self.timeout}")

    def backend(self) -> type[Backend]:
        from lab.extensions.trackers.mlflow_backend import MlflowBackend

        return MlflowBackend
