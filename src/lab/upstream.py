"""Every private API of Hydra and torch the template leans on, each behind one function here and nowhere else, with
why. tests/unit/test_upstream.py checks each against the installed versions, so an upgrade that moves or changes
one fails there, naming it, instead of somewhere in a run. docs/architecture.md lists them.

The private modules are imported inside the functions: this module is imported before torch, by every entry script.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def hydra_run_job_wrapped(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """`hydra._internal.hydra.run_job` (what `Hydra.run`, a single run, calls with keywords only) replaced by
    `wrap(run_job)` for the duration: the only place where the composed config's resolved `hydra.run.dir` is known
    before Hydra creates the dir and writes into it (lab.cli.run_dir_checked)."""
    from hydra._internal import hydra as hydra_internal

    original = hydra_internal.run_job
    hydra_internal.run_job = wrap(original)
    try:
        yield
    finally:
        hydra_internal.run_job = original


@contextlib.contextmanager
def hydra_report_wrapped(wrap: Callable[[Callable[[], Any]], Any]) -> Iterator[None]:
    """`hydra._internal.utils.run_and_report(func)` (how `hydra.main` runs and reports what fails while composing:
    it prints and exits, nothing reaches the caller) replaced by one that calls `wrap(func)` through it: a config
    mistake is reported in one line before Hydra's 5-12 line report (lab.cli.concise_config_errors)."""
    from hydra._internal import utils as hydra_utils

    original = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        return original(lambda: wrap(func))

    hydra_utils.run_and_report = run_and_report
    try:
        yield
    finally:
        hydra_utils.run_and_report = original


def hydra_args_parser() -> Any:
    """Hydra's own command-line parser (`hydra._internal.utils.get_args_parser`): an entry script's command line is
    read before Hydra runs exactly as Hydra will read it (lab.run_dir.command_line)."""
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def hydra_apply_overrides(overrides: list[Any], config: Any) -> None:
    """What composing does with plain (non-group) overrides, `ConfigLoaderImpl._apply_overrides_to_config`: the
    grid sweeper composes once per choice of config groups and applies each job's other overrides to a copy."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config(overrides, config)


def hydra_basic_sweeper() -> type:
    """Hydra's grid sweeper (`hydra._internal.core_plugins.basic_sweeper.BasicSweeper`), which the template's grid
    sweeper extends (hydra_plugins/lab_sweepers/grid_sweeper.py): its parsing, batching and job numbering."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return BasicSweeper


def hydra_config_repository_copied_shallowly() -> None:
    """Hydra (1.3) copies its config repository at every composition (twice per run, once per sweep job) and for
    every group that `--help` lists (119 times), with `copy.deepcopy`, which also copies the ConfigStore every
    option is stored in: 0.05 s a copy, 6 of the 7 s `scripts/train.py --help` took. The copy exists because the
    caller may point it at another search path (`initialize_sources`), which gives the copy a new list of sources
    and changes none of the old ones: a shallow copy keeps the original as safe, and shares the store. (Upstream's
    fix, facebookresearch/hydra#2928, stops the sources holding the store; released Hydras lack it.)"""
    from hydra._internal.config_repository import CachingConfigRepository, IConfigRepository

    def __init__(self: CachingConfigRepository, delegate: IConfigRepository) -> None:
        self.delegate = copy.copy(delegate)
        self.cache = {}

    CachingConfigRepository.__init__ = __init__  # type: ignore[method-assign]  # Hydra's, patched as said above


@contextlib.contextmanager
def torch_elastic_signal_handler_wrapped(wrap: Callable[[Callable[[int, Any], None]], Any]) -> Iterator[None]:
    """torch's elastic launcher installs `api._terminate_process_handler` for the stop signals when it starts its
    workers (it raises SignalException); replaced by `wrap(handler)` for the duration, so the launcher acts on its
    first stop signal only (lab.distributed.launch)."""
    from torch.distributed.elastic.multiprocessing import api

    original = api._terminate_process_handler
    api._terminate_process_handler = wrap(original)
    try:
        yield
    finally:
        api._terminate_process_handler = original


@contextlib.contextmanager
def torch_spawn_waits_capped(seconds: float) -> Iterator[None]:
    """torch.multiprocessing's `ProcessContext._join_procs_with_timeout(timeout)`, the wait between SIGTERM and
    SIGKILL of the other ranks once one has failed (a fixed 30 s, whatever LaunchConfig says), capped at `seconds`
    for the duration (lab.distributed.launch)."""
    from torch.multiprocessing.spawn import ProcessContext

    join = ProcessContext._join_procs_with_timeout
    ProcessContext._join_procs_with_timeout = lambda context, timeout: join(context, min(timeout, seconds))  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        ProcessContext._join_procs_with_timeout = join  # type: ignore[method-assign]


def torch_loader_sigchld_handler_kept_out() -> None:
    """torch's DataLoader installs a SIGCHLD handler (once per process, guarded by `signal_handling.
    _SIGCHLD_handler_set`) that raises a dead worker's RuntimeError at whatever line the main process is on; the
    flag set first keeps it out, and the loader finds a dead worker where it waits for a batch (lab.data.loaders)."""
    from torch.utils.data._utils import signal_handling

    signal_handling._SIGCHLD_handler_set = True
