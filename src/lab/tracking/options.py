"""The trackers the core ships: wandb and CSV, each an option of the `tracker` kind (lab.config.trackers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.checks import wandb_project, wandb_tags
from lab.config.trackers import TrackerConfig

if TYPE_CHECKING:
    from lab.tracking.backends import Backend


@dataclass
class WandbConfig(TrackerConfig):
    """Weights & Biases (lab.tracking.wandb_backend), offline unless credentials exist.

    Log in with `wandb login` or WANDB_API_KEY; sync offline runs later with `wandb sync`. WANDB_MODE, WANDB_PROJECT,
    WANDB_ENTITY and WANDB_DIR are honoured when mode/project/entity are left at auto/null."""

    mode: str = "auto"  # auto: $WANDB_MODE, else online when credentials exist (WANDB_API_KEY or netrc), else offline
    project: str | None = None  # null: $WANDB_PROJECT, else "lab"
    entity: str | None = None  # null: $WANDB_ENTITY or your default entity
    group: str | None = None  # null: the sweep's name for multirun jobs
    tags: list[str] = field(default_factory=list)  # added to the top-level `tags`
    init_timeout: float = 30.0  # seconds to reach the server before falling back to offline

    def __post_init__(self) -> None:
        _one_of(self.key_of("mode"), self.mode, ("auto", "online", "offline", "disabled"))
        _require(self.init_timeout > 0, f"{self.key_of('init_timeout')} must be > 0, got {self.init_timeout}")
        wandb_tags(self.key_of("tags"), self.tags)
        wandb_project(self.key_of("project"), self.project)

    def backend(self) -> type[Backend]:
        from lab.tracking.wandb_backend import WandbBackend

        return WandbBackend


@dataclass
class CsvTrackerConfig(TrackerConfig, name="csv"):  # `CsvConfig` is the data option `data=csv`
    """Plain files (lab.tracking.csv_backend): <run dir>/csv/metrics.csv and csv/config.yaml.

    metrics.csv has a row per event and a column per metric; config.yaml is the resolved config with the git commit."""

    def backend(self) -> type[Backend]:
        from lab.tracking.csv_backend import CsvBackend

        return CsvBackend
