"""Helpers shared by the entry scripts. No torch import here (start-up speed)."""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from lab import run_dir as run_dirs
from lab import stopping, upstream
from lab.config import validate
from lab.config.trackers import moved_keys
from lab.dotenv import load_dotenv
from lab.errors import ConfigError, Interrupted, UserError
from lab.sweeps import in_multirun


def full_errors() -> bool:
    """Whether HYDRA_FULL_ERROR=1 asks for every error with its whole traceback, as Hydra reads it."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user mistakes into one clear line and a non-zero exit instead of a traceback.

    Inside a sweep the error is re-raised: Hydra records an exception as that job's failure (the sweep summary
    reports it) and goes on, where a SystemExit would end the whole sweep; with HYDRA_FULL_ERROR=1 as well, so Hydra
    shows where it came from."""
    try:
        with ctrl_c_in_one_line():
            yield
    except Interrupted as err:  # the run saved on a stop signal; exit 128 + the signal, even in a sweep
        print(err, file=sys.stderr)
        sys.exit(err.exit_code)
    except (ConfigError, UserError) as err:
        if in_multirun() or full_errors():
            raise
        sys.exit(f"error: {one_line(err)}")


@contextlib.contextmanager
def ctrl_c_in_one_line() -> Iterator[None]:
    """End on a stop signal with one line and exit code 128 + the signal (130 for Ctrl-C), not a traceback.

    This covers signals no handler of ours catches: imports, composing, building, an eval or export. Only training
    saves first (lab.training.preemption). Elsewhere nothing is saved on the way out, and since files are written
    atomically or staged (lab.files), nothing partial is left under a final name. It still ends a whole sweep.
    HYDRA_FULL_ERROR=1 shows where it arrived."""
    try:
        yield
    except KeyboardInterrupt as stop:
        if full_errors():
            raise
        signum = stopping.signal_number(stop)
        print(stopping.stopped_at_once(signum), file=sys.stderr)
        sys.exit(128 + signum)


def one_line(err: BaseException) -> str:
    """Return the error's message, from the last line of a DataLoader worker's traceback text if it is wrapped."""
    text = str(err)
    if "Original Traceback" not in text:
        return text
    last = [line for line in text.splitlines() if line.strip()][-1]
    # the package's name is not spelt out, since forks rename it
    ours = (f"{UserError.__module__}.", "UserError", "ConfigError")
    return last.split(": ", 1)[1] if last.startswith(ours) else last


def run_workflow(cfg: Any, workflow: str) -> Any:
    """Validate the config, then import (torch-heavy) and run lab.workflows.<workflow>."""
    from hydra.core.hydra_config import HydraConfig

    if in_multirun():  # first, so a refusal or Ctrl-C can undo it
        run_dirs.hydra_dirs.append(Path(HydraConfig.get().runtime.output_dir))  # a single run's: run_dir_checked
    with user_errors():
        validate(cfg)
        run = importlib.import_module(f"lab.workflows.{workflow}").run
        from lab.data.loaders import worker_deaths  # the workflow has imported torch by now
        from lab.training import oom

        # CUDA out of memory gets a memory report and what to try; a dead loader worker gets one line (training
        # names its resume itself)
        with oom.explained(cfg), worker_deaths("run the command again"):
            return run(cfg)


def main(hydra_main: Callable[[], Any], script: str) -> Any:
    """Run an entry script's `@hydra.main` function, reporting config mistakes in one or two lines, refusing a run
    dir `script` may not write before Hydra writes there, and undoing what Hydra wrote for a refused start."""
    # SIGTERM/SIGUSR1/SIGUSR2 stop the set-up, an eval or an export as Ctrl-C does: through every `with` on the way
    # out, so the run-dir lock is released and a started tracker's summary says "interrupted"
    with stopping.raised_at_once():
        load_dotenv()  # credentials from .env, before Hydra reads the environment; set variables win
        with user_errors():
            sys.argv = moved_keys(sys.argv)
            if any("hydra.sweep.dir" in arg for arg in sys.argv[1:]):  # else no sweep code
                from lab.sweeps.ownership import check_sweep_dir_before_hydra

                check_sweep_dir_before_hydra(sys.argv)
            command = run_dirs.read_command_line(sys.argv)
        single_run = command is not None and not command[0]  # a sweep, or a line Hydra refuses, is Hydra's alone
        composed_once = upstream.hydra_run_composed_once() if single_run else contextlib.nullcontext()
        with (
            run_dirs.undone_on_refusal(),
            concise_config_errors(),
            ctrl_c_in_one_line(),
            run_dir_checked(script),
            composed_once,
        ):
            return hydra_main()


@contextlib.contextmanager
def run_dir_checked(script: str) -> Iterator[None]:
    """Check a single run's dir with `lab.run_dir.check` just before Hydra's `run_job` creates it.

    By then Hydra has resolved `hydra.run.dir`, so every spelling of the dir is checked as the dir Hydra will
    write. The checked dir is pinned in the config, so a `${now:...}` in it cannot name another dir later. If Hydra
    then fails to write there (a full disk, no permission), the run ends in one line and what it wrote is removed."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write
    from omegaconf.errors import OmegaConfBaseException

    def checked(hydra_run_job: Callable[..., Any]) -> Callable[..., Any]:
        return functools.partial(run_job, hydra_run_job)

    def run_job(hydra_run_job: Callable[..., Any], *, config: Any, **kwargs: Any) -> Any:
        HydraConfig.instance().set_config(config)  # as run_job does first, so `${hydra:...}` in the dir resolves
        with user_errors():
            try:
                run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).expanduser().absolute()
            except OmegaConfBaseException as err:  # an unset ${oc.env:...}, or a missing key
                why = str(err).splitlines()[0]
                raise UserError(
                    f"hydra.run.dir cannot be resolved ({why}): set what it names, or name the dir"
                ) from None
            starts = {key: OmegaConf.select(config, key) for key in ("resume", "overwrite", "ckpt_path")}
            starts["overrides"] = list(OmegaConf.select(config, "hydra.overrides.task") or ())
            attempt_subdir = run_dirs.check(run_dir, script, starts)
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.run.dir = str(run_dir)
            if attempt_subdir is not None:
                config.hydra.output_subdir = attempt_subdir  # a run continued in place keeps its first `.hydra/`
        run_dirs.hydra_dirs.append(run_dir)
        try:
            return hydra_run_job(config=config, **kwargs)
        except OSError as err:  # the task's own errors never get here; run_job keeps them in its JobReturn
            where = err.filename or run_dir
            full = err.errno in (errno.ENOSPC, errno.EDQUOT)
            fix = "free some space there, or choose another" if full else "choose a writable"
            sys.exit(
                f"error: hydra.run.dir={run_dir}: Hydra could not write {where} ({err.strerror}); {fix} "
                "hydra.run.dir (or paths.outputs)"
            )

    with upstream.hydra_run_job_wrapped(checked):
        yield


@contextlib.contextmanager
def concise_config_errors() -> Iterator[None]:
    """Report a mistake in the config or overrides (an unknown key or option, a wrong type, an unparsable override)
    in one line and exit 1, instead of Hydra's 5-12 line report; HYDRA_FULL_ERROR=1 still gets Hydra's.

    Hydra reports composing errors through one function that prints and exits, so that function is wrapped for the
    call (lab.upstream.hydra_report_wrapped). What `--help` composes is not wrapped by Hydra and arrives here."""
    with _exit_on_config_mistake(), upstream.hydra_report_wrapped(_report_config_mistakes):
        yield


def _report_config_mistakes(func: Callable[[], Any]) -> Any:
    with _exit_on_config_mistake():
        return func()


@contextlib.contextmanager
def _exit_on_config_mistake() -> Iterator[None]:
    try:
        yield
    except Exception as err:
        if full_errors() or _raised_by_the_job(err.__traceback__):
            raise  # an error of the run itself (a bug, a failed job) is not a config mistake; Hydra reports it
        from lab.config.mistakes import describe

        message = describe(err)
        if message is None:
            raise
        sys.exit(f"error: {message}")


def _raised_by_the_job(tb: TracebackType | None) -> bool:
    """Whether the exception came from the task function (through Hydra's run_job), not from composing."""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "run_job" and tb.tb_frame.f_globals.get("__name__") == "hydra.core.utils":
            return True
        tb = tb.tb_next
    return False
