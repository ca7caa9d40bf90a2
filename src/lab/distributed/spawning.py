"""Spawn `dist.nproc` local workers with torch's elastic launcher (the engine behind torchrun), on a fresh c10d
rendezvous each attempt, and report a failing rank's error (lab.distributed.launch.start imports this only then).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from omegaconf import DictConfig, OmegaConf
from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record

from lab import stopping, upstream
from lab.config import train_schema
from lab.errors import ConfigError, Interrupted, UserError

log = logging.getLogger(__name__)
_FORWARDED_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"
_SIGNALS = {signal.Signals[name] for name in _FORWARDED_SIGNALS.split(",")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def resolve_nproc(dist_cfg: Any) -> int:
    """Return one process per GPU, or two gloo processes on a CPU-only machine. An explicit count must fit the
    machine: ranks sharing a GPU, or more ranks than cores, starve each other in collectives and make no progress."""
    gpus, cores = torch.cuda.device_count(), os.cpu_count() or 1
    if dist_cfg.nproc == "auto":
        return gpus or 2
    nproc = int(dist_cfg.nproc)
    if gpus and nproc > gpus:
        raise ConfigError(f"dist.nproc={nproc} but {gpus} GPU(s) are visible: one rank per GPU, dist.nproc<={gpus}")
    if not gpus and nproc > cores:
        raise ConfigError(
            f"dist.nproc={nproc} exceeds this machine's {cores} CPU cores: the ranks would starve each other; "
            f"use dist.nproc<={cores} (or dist=none)"
        )
    return nproc


@record  # the failing rank's traceback reaches the launcher, which names it
def spawned_rank(
    joined: Callable[..., Any], train: Callable[..., Any], container: dict, run_dir: str, *args: Any
) -> Any:
    """One spawned rank: the config typed again, as Hydra gave it, then `joined(train, cfg, run_dir, *args)`
    (lab.distributed.launch.joined, handed over since that module imports this one)."""
    cfg = cast(DictConfig, OmegaConf.merge(OmegaConf.structured(train_schema()), container))
    configure_worker_logging(Path(run_dir) / f"{cfg.task_name}.log")
    last = Path(run_dir) / "checkpoints" / "last.pt"
    if restart_count() and last.is_file():  # with dist.max_restarts, a restart continues the failed attempt
        cfg.ckpt_path = str(last)
    return joined(train, cfg, Path(run_dir), *args)


def spawn(
    worker: Callable[..., Any],
    args: tuple,
    dist_cfg: Any,
    resume_hint: str = "continue with resume=<run dir>",
    last: Path | None = None,
) -> Any:
    """Run `worker(*args)` in `dist.nproc` local processes. Return rank 0's result, or raise naming the failed rank.
    `last` is the run's last.pt. After a stop signal, the message says it was saved only if the ranks wrote it.

    With dist.max_restarts=N, a failed attempt (a crash or a lost rank, not a config/data error or a stop signal)
    starts all workers again, up to N times, and they resume from last.pt (`restart_count()`). Each attempt is an
    elastic launch of its own, on a fresh rendezvous: restarting within one launch (the agent's own max_restarts)
    intermittently failed to connect the gloo process group, or hung in it, on the failed attempt's keys in the
    agent's store (under torchrun, whose restarts are the agent's, `launch._restart_store` says how)."""
    nproc = resolve_nproc(dist_cfg)
    # OMP_NUM_THREADS for each rank: the user's setting, else this machine's cores shared out. torchrun sets it (to 1)
    # but the elastic launcher does not, and N ranks each using every core oversubscribe it.
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // nproc))
    for attempt in range(dist_cfg.max_restarts + 1):
        try:
            with _environment(OMP_NUM_THREADS=threads):
                return _launch(worker, args, attempt, dist_cfg, nproc, threads, resume_hint, last)
        except ChildFailedError as err:
            reason, restartable = _describe_failure(err, nproc)
            log.error("%s", reason)  # to the run's log file as well as the console
            if not restartable or attempt == dist_cfg.max_restarts:
                raise UserError(reason) from None
            log.warning(
                "restarting the workers (restart %d of dist.max_restarts=%d); they resume from last.pt",
                attempt + 1,
                dist_cfg.max_restarts,
            )
    raise AssertionError("unreachable")


RESTART_COUNT = "LAB_RESTART_COUNT"  # the workers' attempt: 0, then 1, 2, ... after dist.max_restarts restarts


def restart_count() -> int:
    """Return how many times this job's workers were restarted after a failure (dist.max_restarts)."""
    return int(os.environ.get(RESTART_COUNT, "0"))


def _attempt(attempt: int, launcher: int, worker: Callable[..., Any], *args: Any) -> Any:
    """Run one rank of attempt `attempt`, telling it the attempt through its own environment (`restart_count()`),
    since the forkserver's children inherit the environment of the first attempt. A stop signal the rank gets goes
    on to the launcher (pid `launcher`), which stops every rank with it, as if it got it itself."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # blocked in the forkserver (_start_forkserver)
    stopping.tell_launcher(launcher)
    os.environ[RESTART_COUNT] = str(attempt)
    try:
        with stopping.raised_at_once():
            return worker(*args)
    except KeyboardInterrupt as stop:  # stopped before training (or Ctrl-C again); the launcher reports it
        sys.exit(128 + stopping.signal_number(stop))


def _start_forkserver() -> None:
    """Start multiprocessing's resource tracker and forkserver with the stop signals blocked, which they keep.
    Otherwise a signal to the whole job (Ctrl-C, `kill -- -<pgid>`, scancel) killed them beside the ranks, and the
    tracker's replacement printed a KeyError traceback for each semaphore it had never seen. They end when the
    launcher does, and the ranks unblock the signals (`_attempt`). Start them one at a time, because starting the
    tracker unblocks SIGINT and SIGTERM here again."""
    from multiprocessing import forkserver, resource_tracker

    for start in (resource_tracker.ensure_running, forkserver.ensure_running):
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _launch(
    worker: Callable[..., Any],
    args: tuple,
    attempt: int,
    dist_cfg: Any,
    nproc: int,
    threads: str,
    resume_hint: str,
    last: Path | None,
) -> Any:
    import multiprocessing

    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # the elastic agent, only to spawn

    # The ranks are forks of one server process that imported torch (and torch._dynamo, which building an optimizer
    # imports), the entry script and the worker's module once. Spawned ranks would each import them, seconds of CPU
    # apiece (2 ranks on 2 cores: a debug=fast DDP run 16.7 s -> 14.1 s, two at once 27.5 s -> 15.5 s). The server
    # holds no CUDA state, so the forks may use the GPU: spawn's safety with fork's start-up. It starts with this
    # process's environment at the first launch. torchelastic hands each rank its own variables (OMP_NUM_THREADS,
    # CUDA_VISIBLE_DEVICES) and _attempt the restart count. A function among the worker's arguments (what `start`'s
    # ranks train with) has its module imported there too.
    modules = [worker.__module__, *(arg.__module__ for arg in args if inspect.isfunction(arg))]
    multiprocessing.set_forkserver_preload(["__main__", "torch", "torch._dynamo", *modules])
    _start_forkserver()
    port = dist_cfg.master_port or free_port()
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{port}",
        max_restarts=0,  # restarts are new launches (see spawn)
        monitor_interval=0.2,
        # after a stop signal, the workers get this long to exit before SIGKILL (for a failed rank, see
        # _failure_handled_promptly)
        shutdown_timeout=dist_cfg.grace_s,
        start_method="forkserver",
        # the launcher forwards these to the workers, which finish their step, save last.pt and stop
        # (lab.training.preemption). A signal left out (SIGUSR1 by default) would kill the launcher alone and
        # orphan them. elastic_launch writes this to TORCHELASTIC_SIGNALS_TO_HANDLE, over any value set before.
        signals_to_handle=_FORWARDED_SIGNALS,
    )
    log.info(
        "launching %d %s workers (rendezvous 127.0.0.1:%d, %s threads each)", nproc, dist_cfg.strategy, port, threads
    )
    started = time.time()
    try:
        # elastic_launch leaves its TORCHELASTIC_SIGNALS_TO_HANDLE in os.environ (_environment restores it)
        with (
            _environment(TORCHELASTIC_SIGNALS_TO_HANDLE=_FORWARDED_SIGNALS),
            _first_signal_only(),
            _failure_handled_promptly(dist_cfg.grace_s),
        ):
            return elastic_launch(config, _attempt)(attempt, os.getpid(), worker, *args)[0]
    except SignalException as err:
        name = signal.Signals(err.sigval).name
        if last is None or not last.is_file() or last.stat().st_mtime < started:  # stopped before training saved
            raise Interrupted(stopping.stopped_at_once(err.sigval), exit_code=128 + err.sigval) from None
        raise Interrupted(
            f"interrupted by {name}: every rank finished its optimizer step and saved last.pt ({resume_hint})",
            exit_code=128 + err.sigval,
        ) from None


@contextlib.contextmanager
def _first_signal_only() -> Iterator[None]:
    """While the workers run, act on the launcher's first stop signal only: stop the ranks with it and wait for
    them to save. Each rank passes on what it gets (`_attempt`), and a later signal would raise torch's
    SignalException again inside that wait, ending the launcher before its ranks. torch's handler is patched for the
    launch, and the previous handlers come back afterwards, since torch's, left installed, would raise outside it."""
    before = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    got: list[int] = []

    def first_only(torch_handler: Callable[[int, Any], None]) -> Callable[[int, Any], None]:
        def handler(signum: int, frame: Any) -> None:
            if not got:
                got.append(signum)
                torch_handler(signum, frame)  # raises SignalException

        return handler

    try:
        with upstream.torch_elastic_signal_handler_wrapped(first_only):  # used when the launch installs handlers
            yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _failure_handled_promptly(grace_s: float) -> Iterator[None]:
    """Once a rank has failed, give the others grace_s to exit before SIGKILL, and report the failure at once.

    The elastic agent hands a failed rank to torch.multiprocessing's ProcessContext.join, called without a grace
    period. That SIGTERMs the other ranks, then waits a fixed 30 s before SIGKILL (LaunchConfig's shutdown_timeout
    bounds only the shutdown on a stop signal). So a rank that cannot act on SIGTERM (stopped, or blocked in C code)
    held the job 30 s past the dist.timeout_s after which its peers gave up: 60 s, not 30 s, for dist.timeout_s=20
    and grace_s=10. Here every wait of that join is capped at grace_s.

    The agent then logs the failed rank's traceback through torch's log formatter, which imports torch._dynamo to
    format any exception (seconds, more on a loaded machine). So the traceback is formatted as plain text first."""
    agent_log = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    agent_log.addFilter(_plain_traceback)
    try:
        with upstream.torch_spawn_waits_capped(grace_s):
            yield
    finally:
        agent_log.removeFilter(_plain_traceback)


def _plain_traceback(record: logging.LogRecord) -> bool:
    """Turn the record's exception into ready text (exc_text), the same text logging makes of it. torch's formatter
    prints that as it is, instead of importing torch._dynamo to format exc_info."""
    if record.exc_info:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None
    return True


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set variables for the processes started inside, which inherit os.environ. Restore them afterwards, since
    a multirun worker goes on to other jobs."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# what a rank reports when *another* rank died: the collective it was in broke, but that is not the cause
_SYMPTOMS = (
    "Connection closed by peer",
    "Connection reset",
    "Broken pipe",
    "DistBackendError",
    "ProcessGroup",
    "NCCL",
    "Timed out",
    "timed out",
    "SIGTERM",
    "Signals.SIGKILL",
    "exitcode",
)


def _describe_failure(err: ChildFailedError, nproc: int) -> tuple[str, bool]:
    """Return the root cause, and whether a restart may help (not for a config or data error, nor a stop signal).

    The cause is the earliest failing rank whose error is its own, not a broken collective, with its exception type,
    message and where it was raised. If every failure is a broken collective, the ranks that did not fail are the
    ones their peers waited for: hung, stopped or too slow."""
    failures = sorted(err.failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    described = [(rank, *_exception(failure)) for rank, failure in failures]
    own = [d for d in described if not any(s in d[1] for s in _SYMPTOMS)]
    rank, reason, where, users = own[0] if own else described[0]
    silent = [str(r) for r in range(nproc) if r not in err.failures]
    if not own and silent:
        return (
            f"rank {', '.join(silent)} stopped responding (hung, stopped or far too slow): rank {rank} gave up "
            f"waiting for it after dist.timeout_s: {reason}"
        ), True
    return f"rank {rank} failed: {reason}" + (f" ({where})" if where else ""), not users


def _exception(failure: Any) -> tuple[str, str, bool]:
    """Return the first line "<Type>: <message>", "file:line" where it was raised, and whether it is a lab.errors
    one (a UserError, a ConfigError or a stop signal's Interrupted), from what @record wrote."""
    message = failure.message
    callstack = ""
    if isinstance(message, dict):  # written by @record: {"message": "<Type>: <text>", "extraInfo": {...}}
        callstack = str(message.get("extraInfo", {}).get("py_callstack", ""))
        message = message.get("message", "")
    lines = [line for line in str(message).splitlines() if line.strip()]
    reason = lines[0] if lines else f"exit code {failure.exitcode}"
    errors = f"{UserError.__module__}."  # the package's errors module, named as the package is named
    users = reason.startswith((errors, "UserError: ", "ConfigError: ", "Interrupted: "))
    for prefix in (f"{errors}UserError: ", f"{errors}ConfigError: ", "UserError: ", "ConfigError: "):
        reason = reason.removeprefix(prefix)
    frames = [line.strip() for line in callstack.splitlines() if line.strip().startswith('File "')]
    where = ""
    if frames:
        path, line = frames[-1].split('"')[1], frames[-1].split("line ")[1].split(",")[0]
        where = f"{path}:{line}"
    return reason, where, users


def configure_worker_logging(log_file: Path) -> None:
    """Set up logging in a spawned worker, which starts bare. Rank 0 appends to the run's log file and prints like
    Hydra's job logging. The other ranks print warnings only."""
    rank = int(os.environ.get("RANK", "0"))
    root = logging.getLogger()
    root.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    formatter = logging.Formatter(f"[%(asctime)s][rank{rank}][%(name)s][%(levelname)s] %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if rank == 0:
        handlers.append(logging.FileHandler(log_file))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
