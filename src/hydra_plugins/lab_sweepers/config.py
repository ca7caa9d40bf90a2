"""Register the grid sweeper's config as `hydra/sweeper=lab_grid`, the default in conf/hydra/default.yaml."""

# No `from __future__ import annotations`: Hydra executes plugin modules before putting them in sys.modules, and
# dataclasses cannot resolve string annotations of a module that is not there yet.
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.lab_sweepers.grid_sweeper.GridSweeper"
    max_batch_size: int | None = None  # jobs per launcher call; null is all (the launcher's width with fail_fast)
    params: dict[str, str] | None = None  # sweep axes in the config, merged with the command line's


ConfigStore.instance().store(group="hydra/sweeper", name="lab_grid", node=GridSweeperConf, provider="lab")
