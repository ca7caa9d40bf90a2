"""Helpers shared by the entry scripts. No torch import here (start-up speed)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from lab import run_dir as run_dirs
from lab import stopping
from lab.config import validate
from lab.config.mistakes import describe
from lab.config.trackers import moved_keys
from lab.dotenv import load_dotenv
from lab.errors import ConfigError, Interrupted, UserError
from lab.sweeps.jobs import in_multirun
from lab.sweeps.ownership import check_sweep_dir_before_hydra


def full_errors() -> bool:
    """HYDRA_FULL_ERROR=1 (Hydra's switch, read the way Hydra reads it): every error with its whole traceback."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn user mistakes into one clear line and a non-zero exit instead of a traceback.

    Inside a sweep the error is re-raised instead: Hydra records an exception as that job's failure and goes on
    with the next job, while SystemExit (not an Exception) would escape Hydra and end the whole sweep. The sweep
    summary reports the job's error and the sweep's exit code (lab/sweeps/summary.py). With HYDRA_FULL_ERROR=1 it
    is re-raised too, so Hydra shows where it came from.
    """
    try:
        with ctrl_c_in_one_line():
            yield
    except Interrupted as err:  # a stop signal: the run saved and asks to end with 128 + the signal (even a sweep)
        print(err, file=sys.stderr)
        sys.exit(err.exit_code)
    except (ConfigError, UserError) as err:
        if in_multirun() or full_errors():
            raise
        sys.exit(f"error: {one_line(err)}")


# Training saves last.pt on a stop signal itself (an Interrupted, above); wherever else one arrives nothing is saved
# on the way out, and files are written atomically or staged (lab.files): nothing partial is left under a final name
CTRL_C = stopping.stopped_at_once(signal.SIGINT)


@contextlib.contextmanager
def ctrl_c_in_one_line() -> Iterator[None]:
    """A stop signal where no handler of ours catches it (imports, composing the config, building data and model, an
    eval or export: only training saves first, lab.training.preemption) ends with one line and 128 + the signal
    (130 for Ctrl-C), not a KeyboardInterrupt traceback: lab.stopping raises it as one. It still ends a whole
    sweep. HYDRA_FULL_ERROR=1 shows where it arrived."""
    try:
        yield
    except KeyboardInterrupt as stop:
        if full_errors():
            raise
        signum = stopping.signal_number(stop)
        print(stopping.stopped_at_once(signum), file=sys.stderr)
        sys.exit(128 + signum)


def one_line(err: BaseException) -> str:
    """The message itself: an error raised in a DataLoader worker arrives wrapped in the worker's traceback text,
    whose last line is the original `<Type>: <message>`."""
    text = str(err)
    if "Original Traceback" not in text:
        return text
    last = [line for line in text.splitlines() if line.strip()][-1]
    ours = (
        f"{UserError.__module__}.",
        "UserError",
        "ConfigError",
    )  # the package's own name, not spelt: forks rename it
    return last.split(": ", 1)[1] if last.startswith(ours) else last


def run_workflow(cfg: Any, workflow: str) -> Any:
    """What every entry script does: validate the config, then import (torch-heavy) and run lab.workflows.<x>."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():  # noted first: a refusal or a Ctrl-C from here on leaves it as it was found
        run_dirs.register_hydra_dir(Path(HydraConfig.get().runtime.output_dir))
    with user_errors():
        validate(cfg)
        run = importlib.import_module(f"lab.workflows.{workflow}").run
        from lab.training import oom  # torch is imported by now (the workflow's own imports)

        with oom.explained(cfg):  # a CUDA out-of-memory error: a memory report and what to try, then one line
            return run(cfg)


def main(hydra_main: Callable[[], Any], script: str) -> Any:
    """Run an entry script's `@hydra.main` function with config mistakes reported in one or two lines. An explicit
    `hydra.run.dir` that `script` may not write is refused before Hydra writes into it, and a start refused after
    Hydra wrote leaves the run dir as it found it (lab.run_dir)."""
    # SIGTERM/SIGUSR1/SIGUSR2 stop the set-up (and an eval or export) as Ctrl-C does: through every `with` on the
    # way out (the run-dir lock released, a started tracker's summary "interrupted"), not killed in place
    with stopping.raised_at_once():
        load_dotenv()  # credentials from .env (never over variables already set), before Hydra reads the environment
        with user_errors():
            sys.argv = moved_keys(sys.argv)
            check_sweep_dir_before_hydra(sys.argv)
            sys.argv = run_dirs.check_before_hydra(sys.argv, script)
        with run_dirs.undone_on_refusal(), concise_config_errors(), ctrl_c_in_one_line():
            return hydra_main()


@contextlib.contextmanager
def concise_config_errors() -> Iterator[None]:
    """A mistake in the config or the overrides (an unknown key or option, a wrong type, an unparsable override)
    ends with `error: <what, the nearest valid name, what is allowed>` (lab.config.mistakes) and exit code 1,
    instead of Hydra's 5-12 line report. HYDRA_FULL_ERROR=1 still gets Hydra's full report.

    Hydra composes inside `hydra.main` and reports what fails there itself, through one function,
    `hydra._internal.utils.run_and_report` (it prints and exits: nothing reaches the caller). That function is
    wrapped for the duration of the call: a config mistake is printed short before Hydra would report it, anything
    else goes to Hydra's own report unchanged. What `--help` composes is not wrapped by Hydra and arrives here.
    """
    from hydra._internal import utils as hydra_utils

    hydra_report = hydra_utils.run_and_report

    def run_and_report(func: Callable[[], Any]) -> Any:
        return hydra_report(functools.partial(_report_config_mistakes, func))

    hydra_utils.run_and_report = run_and_report
    try:
        yield
    except Exception as err:
        _exit_if_config_mistake(err)
        raise
    finally:
        hydra_utils.run_and_report = hydra_report


def _report_config_mistakes(func: Callable[[], Any]) -> Any:
    try:
        return func()
    except Exception as err:
        _exit_if_config_mistake(err)
        raise


def _exit_if_config_mistake(err: Exception) -> None:
    if full_errors() or _raised_by_the_job(err.__traceback__):
        return  # an error of the run itself (a bug, a failed job) is not a config mistake: Hydra reports it
    message = describe(err)
    if message is not None:
        sys.exit(f"error: {message}")


def _raised_by_the_job(tb: TracebackType | None) -> bool:
    """Whether the exception passed through Hydra's run_job, i.e. came from the task function, not from composing."""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "run_job" and tb.tb_frame.f_globals.get("__name__") == "hydra.core.utils":
            return True
        tb = tb.tb_next
    return False
