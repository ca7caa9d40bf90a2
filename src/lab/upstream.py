"""Wrap every private API of Hydra and torch the template uses, each in one function here, with why.

tests/unit/test_upstream.py checks each against the installed versions (docs/architecture.md §6). The private
modules are imported inside the functions, because every entry script imports this module before torch (Hydra's
public ConfigStore is imported with it: every entry script loads it anyway).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

from hydra.core.config_store import ConfigNode, ConfigStore
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lab.errors import ConfigError

Patch = contextlib.AbstractContextManager[None]  # a private API replaced while its `with` block runs


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def hydra_run_job_wrapped(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Patch:
    """Replace `hydra._internal.hydra.run_job` with `wrap(run_job)` for the duration.

    A single run calls it with keywords only. It is the one place where the resolved `hydra.run.dir` is known before
    Hydra creates the dir (lab.cli.run_dir_checked)."""
    from hydra._internal import hydra as hydra_internal

    return _patched(hydra_internal, "run_job", wrap(hydra_internal.run_job))


def hydra_report_wrapped(wrap: Callable[[Callable[[], Any]], Any]) -> Patch:
    """Make `hydra._internal.utils.run_and_report(func)`, which reports composing errors and exits, call `wrap(func)`.

    So a config mistake is reported in one line before Hydra's 5-12 line report (lab.cli.concise_config_errors)."""
    from hydra._internal import utils as hydra_utils

    original = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        return original(lambda: wrap(func))

    return _patched(hydra_utils, "run_and_report", run_and_report)


@contextlib.contextmanager
def hydra_run_composed_once() -> Iterator[None]:
    """Make a single run compose its config once, where Hydra composes it twice.

    Hydra 1.3 composes the whole config in multirun mode (`Hydra.get_mode`) only to read `hydra.mode`; unset, it adds
    the override `hydra.mode=RUN` and `Hydra.run` composes again: 0.1 s of every run's start-up. Here `get_mode`
    composes in run mode and applies that override itself, and `run` takes the config as it was composed
    (`ConfigLoaderImpl.load_configuration`). A config that fails to compose goes through Hydra's own `get_mode`, so
    what is reported stays Hydra's. Only for a command line that is not a sweep (lab.cli.main)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    composed: dict[tuple[str | None, tuple[str, ...]], Any] = {}
    get_mode, load_configuration = Hydra.get_mode, ConfigLoaderImpl.load_configuration

    def get_mode_once(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
        try:
            cfg = self.config_loader.load_configuration(config_name, overrides, RunMode.RUN)
        except Exception:
            return get_mode(self, config_name, overrides)
        mode, key = cfg.hydra.mode, (config_name, tuple(overrides))
        if mode is None:  # what Hydra's `_run_app` will compose: the same overrides and `hydra.mode=RUN`
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
            key = (config_name, (*overrides, "hydra.mode=RUN"))
        if mode != RunMode.MULTIRUN:  # a sweep composes in its own mode
            composed[key] = cfg
        return mode

    def load_composed(
        self: ConfigLoaderImpl, config_name: str | None, overrides: list[str], run_mode: Any, **kw: Any
    ) -> Any:
        cfg = composed.pop((config_name, tuple(overrides)), None) if run_mode == RunMode.RUN else None
        return load_configuration(self, config_name, overrides, run_mode, **kw) if cfg is None else cfg

    with _patched(Hydra, "get_mode", get_mode_once), _patched(ConfigLoaderImpl, "load_configuration", load_composed):
        yield


def hydra_args_parser() -> Any:
    """Return Hydra's own command-line parser, to read a command line before Hydra runs exactly as Hydra will."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def hydra_apply_overrides(overrides: list[Any], config: Any) -> None:
    """Apply plain (non-group) overrides to `config` as composing does (`ConfigLoaderImpl`).

    The grid sweeper composes once per choice of config groups and applies each job's other overrides to a copy."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config(overrides, config)


def hydra_basic_sweeper() -> type:
    """Return Hydra's `BasicSweeper`, whose parsing, batching and job numbering our grid sweeper extends."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def hydra_config_repository_copied_shallowly() -> None:
    """Make Hydra copy its config repository shallowly, which saves 6 of the 7 s `train.py --help` took.

    Hydra 1.3 deep-copies the repository at every composition and for every group `--help` lists (119 times). That
    also copies the ConfigStore, at 0.05 s a copy. The copy exists because the caller may give it a new search path
    (`initialize_sources`), which replaces its list of sources and changes none of the old ones. A shallow copy is
    as safe and shares the store. Upstream's fix (facebookresearch/hydra#2928) is in no released Hydra yet."""
    from hydra._internal.config_repository import CachingConfigRepository, IConfigRepository

    def __init__(self: CachingConfigRepository, delegate: IConfigRepository) -> None:
        self.delegate = copy.copy(delegate)
        self.cache = {}

    CachingConfigRepository.__init__ = __init__  # type: ignore[method-assign]  # patched, see the docstring


class _DeferredNode(ConfigNode):
    """A ConfigStore entry whose node `OmegaConf.structured` makes when a composition first reads it."""

    def __init__(self, name: str, schema: Any, group: str | None, package: str | None) -> None:
        self.name, self.group, self.package, self.provider = name, group, package, None
        self._schema, self._node = schema, None

    @property
    def node(self) -> Any:  # type: ignore[override]  # ConfigNode's field, made on first read here
        if self._node is None:
            try:
                self._node = OmegaConf.structured(self._schema)
            except OmegaConfBaseException as err:  # a fork's option with a field type OmegaConf cannot hold
                name = self.name.removesuffix(".yaml")
                chosen = f"{self.group}={name}" if self.group else name
                where = f"{self._schema.__module__}.{self._schema.__qualname__}.{err.full_key}"
                raise ConfigError(
                    f"{chosen}: {str(err).splitlines()[0]} ({where}); type "
                    "its fields with what OmegaConf holds: str, int, float, bool, Enum, a dataclass, or a list, "
                    "dict or Optional of them"
                ) from None
        return self._node

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy (ConfigStore.load) or a pickle (a launcher sends the store to its workers) is a plain entry, made.
        return ConfigNode, (self.name, self.node, self.group, self.package, self.provider)


def hydra_store_deferred(name: str, schema: Any, group: str | None = None, package: str | None = None) -> None:
    """Store `schema` in Hydra's ConfigStore as `ConfigStore.store` does, making its node only when first read.

    `store` makes each node at once (`OmegaConf.structured`, 1-2 ms an option): 0.06 s of every command's start-up
    for 50 options, of which a run loads ten. Hydra reads an entry through `ConfigStore.load` (its `node`) and lists
    a group through the folders of `ConfigStore.repo`, which this writes as `store` does."""
    folder = ConfigStore.instance().repo
    for part in group.split("/") if group else ():
        folder = folder.setdefault(part, {})
    folder[f"{name}.yaml"] = _DeferredNode(f"{name}.yaml", schema, group, package)


def torch_elastic_signal_handler_wrapped(wrap: Callable[[Callable[[int, Any], None]], Any]) -> Patch:
    """Replace torch elastic's stop-signal handler (`api._terminate_process_handler`) with `wrap(handler)`.

    So the launcher acts on its first stop signal only (lab.distributed.spawning)."""
    from torch.distributed.elastic.multiprocessing import api

    return _patched(api, "_terminate_process_handler", wrap(api._terminate_process_handler))


def torch_spawn_waits_capped(seconds: float) -> Patch:
    """Cap at `seconds` torch.multiprocessing's fixed 30 s wait between SIGTERM and SIGKILL of the other ranks.

    The wait comes once a rank has failed, whatever LaunchConfig says (`ProcessContext._join_procs_with_timeout`)."""
    from torch.multiprocessing.spawn import ProcessContext

    join = ProcessContext._join_procs_with_timeout
    return _patched(
        ProcessContext, "_join_procs_with_timeout", lambda context, timeout: join(context, min(timeout, seconds))
    )


def torch_loader_sigchld_handler_kept_out() -> None:
    """Keep out the DataLoader's SIGCHLD handler by setting its once-per-process guard flag first.

    It would raise a dead worker's error at any line; without it the loader finds the death as it waits for a batch."""
    from torch.utils.data._utils import signal_handling

    signal_handling._SIGCHLD_handler_set = True
