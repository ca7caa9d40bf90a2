"""`hydra/sweeper=lab_optuna` (see conf/hparams_search/optuna.yaml): Bayesian search over current Optuna with
its ask/tell API. Thin on purpose: Hydra imports this module at every start-up, optuna is imported by `_study`
only when a search runs."""

from typing import Any

from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


class OptunaSweeper(Sweeper):
    def __init__(self, **options: Any) -> None:
        # plain containers: the options travel to job overrides (pruner) and into optuna's constructors
        self.options = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in options.items()}
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        from lab import extras

        extras.require("hparams_search=optuna", ("optuna",), instead="a grid sweep: -m key=a,b,c")
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: list[str]) -> Any:
        from ._study import Search

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        return Search(self.options, self.config, self.launcher, self.hydra_context.config_loader).run(arguments)
