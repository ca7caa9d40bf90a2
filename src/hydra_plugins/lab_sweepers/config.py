"""Config of the grid sweeper, registered in Hydra's ConfigStore as `hydra/sweeper=lab_grid` (conf/hydra/default.yaml
makes it the default sweeper). The extensions' sweepers and launchers store their own (extensions.py)."""

# No `from __future__ import annotations`: Hydra executes plugin modules before putting them in sys.modules, and
# dataclasses cannot resolve string annotations of a module that is not there yet.
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.lab_sweepers.grid_sweeper.GridSweeper"
    max_batch_size: int | None = None  # jobs per launcher call; null = all at once (fail_fast: the launcher's width)
    params: dict[str, str] | None = None  # sweep axes in the config, merged with the command line's


ConfigStore.instance().store(group="hydra/sweeper", name="lab_grid", node=GridSweeperConf, provider="lab")
