"""Run trackers slow to start (wandb) in a child Python process, so their work uses another core.

wandb's import and `wandb.init` are about 1 s of Python that holds the GIL: in a thread they would slow the data and
model set-up by as much (bench/startup.py). One child serves the whole process and every slow tracker, each call
naming its tracker. It is kept for the next tracker, so a sweep's jobs keep wandb imported, and ends when this
process ends, after wandb's last writes, so the run files are complete when the command returns.

Only `finish` and `ref` wait for an answer. An error in the child is raised by the call it answers, or by the next
call that does not wait. A child that died (an OOM kill, `kill -9`) raises TrackerStopped at the next call.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from lab.tracking.backends import Backend, RunInfo, TrackerStopped

log = logging.getLogger(__name__)

SRC = Path(__file__).resolve().parents[2]  # the folder holding `lab`, for the child's import path

# The child starts in the tracker-start thread while the main thread may fork DataLoader workers. A fork in the
# middle of Popen copies Popen's exec-status pipe into the worker, and Popen then waits for the worker to exit, so
# the run hung at its first log line. So a fork (os.fork, and multiprocessing's) waits until the child is started
# and this process has closed the child's ends of its pipes.
_STARTING = threading.Lock()
os.register_at_fork(before=_STARTING.acquire, after_in_parent=_STARTING.release, after_in_child=_STARTING.release)


class ChildProcessBackend(Backend):
    """The tracker `name` (a lab.config.trackers option), with its backend run in the child process."""

    def __init__(self, name: str, run: RunInfo, keeps_histograms: bool) -> None:
        super().__init__(run)
        self.name, self.keeps_histograms = name, keeps_histograms

    def start(self) -> None:
        self.child = _child()  # kept to the end; if it dies that is an error, not a reason to replace it
        self.child.send(self.name, "start", self.run)

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        self.child.send(self.name, "log", {key: _plain_scalar(value) for key, value in metrics.items()}, step, epoch)

    def log_histograms(self, histograms: Mapping[str, tuple[list[float], list[float]]], step: int) -> None:
        self.child.send(self.name, "log_histograms", dict(histograms), step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self.child.send(self.name, "summary", {key: _plain_scalar(value) for key, value in values.items()})

    def save_file(self, path: Path) -> None:
        self.child.send(self.name, "save_file", Path(path))

    def log_checkpoint(self, path: Path, alias: str) -> None:
        self.child.send(self.name, "log_checkpoint", Path(path), alias)

    def finish(self, status: str) -> dict[str, Any]:
        return self.child.ask(self.name, "finish", status)

    def ref(self) -> dict[str, Any]:
        return self.child.ask(self.name, "ref")


def _plain_scalar(value: Any) -> Any:
    """Return a torch or numpy scalar as a Python number, so the child never imports torch to unpickle one."""
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", None) == 0 else value


class _Child:
    """This process's end of the child: requests go out, and results, log records and errors come back."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
        with _STARTING:  # no fork while the child's pipe ends are open here; Popen runs no Python fork hooks
            request_read, request_write = os.pipe()
            answer_read, answer_write = os.pipe()
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(request_read), str(answer_write)],
                pass_fds=(request_read, answer_write),
                env=env,
                # Its own process group: a terminal's Ctrl-C goes to the whole group, and a child still importing
                # (not yet ignoring SIGINT) printed a traceback. This process handles the signal and then finishes
                # the tracker through the child.
                process_group=0,
            )
            os.close(request_read)
            os.close(answer_write)
        self.requests = Connection(request_write, readable=False)
        self.answers = Connection(answer_read, writable=False)
        self.late_error: Exception | None = None  # from a call that did not wait; raised at the next one

    def send(self, name: str, method: str, *args: Any) -> None:
        """Call `method` of the tracker `name` in the child, without waiting for it."""
        self._take_answers(block=False)
        if self.late_error is not None:
            err, self.late_error = self.late_error, None
            raise err
        self._write((name, method, args, False))

    def ask(self, name: str, method: str, *args: Any) -> Any:
        """Call `method` of the tracker `name` in the child and wait for its result."""
        self._write((name, method, args, True))
        result = self._take_answers(block=True)
        if self.late_error is not None:  # an earlier call's error; report it, as this call (finish) still happened
            log.warning("the tracker process: %s", self.late_error)
            self.late_error = None
        return result

    def close(self) -> None:
        """End the child after what it was sent, and wait for wandb's last writes."""
        self.requests.close()
        with contextlib.suppress(EOFError, OSError):
            while True:  # log what it sends until it ends; reading also keeps it from blocking on a full pipe
                self._take_answers(block=True)
        if self.late_error is not None:
            log.warning("the tracker process: %s", self.late_error)
        self.process.wait()
        self.answers.close()

    def _write(self, request: tuple) -> None:
        try:
            self.requests.send(request)
        except OSError as err:
            raise TrackerStopped(self._ended_message()) from err

    def _take_answers(self, block: bool) -> Any:
        """Handle waiting answers: log records are logged, errors raised. With `block`, wait for a result."""
        while block or self.answers.poll():
            try:
                kind, payload = self.answers.recv()
            except EOFError:
                if self.requests.closed:  # we are closing, so this is the child's end
                    raise
                raise TrackerStopped(self._ended_message()) from None
            if kind == "result":
                return payload
            if kind == "log":
                level, name, message = payload
                logging.getLogger(name).log(level, "%s", message)
            elif kind == "late_error":
                self.late_error = self.late_error or payload
            else:
                raise payload
        return None

    def _ended_message(self) -> str:
        code = self.process.wait()
        if code < 0:
            how = f"was killed ({signal.Signals(-code).name})"
        else:
            how = f"ended unexpectedly (exit code {code}; its error is in the output above)"
        return f"its child process {how}; logger.child_process=false runs the tracker in the training process instead"


_CHILD: _Child | None = None


def _child() -> _Child:
    global _CHILD
    if _CHILD is None or _CHILD.process.poll() is not None:
        _CHILD = _Child()
        atexit.register(close)
    return _CHILD


def close() -> None:
    """End the child process, if any, once what it was sent is done. Called at exit, and by tests."""
    global _CHILD
    child, _CHILD = _CHILD, None
    if child is not None:
        atexit.unregister(close)
        child.close()


# --------------------------------------------------------------------------- the child's side
class _ForwardLogs(logging.Handler):
    def __init__(self, answers: Connection) -> None:
        super().__init__()
        self.answers = answers

    def emit(self, record: logging.LogRecord) -> None:
        _answer(self.answers, "log", (record.levelno, record.name, record.getMessage()))


def _answer(answers: Connection, kind: str, payload: Any) -> None:
    with contextlib.suppress(OSError):  # the parent was killed; the record is still finished, unheard
        answers.send((kind, payload))


def serve(requests: Connection, answers: Connection) -> None:
    """Run the calls that arrive until the parent closes the pipe, with one backend per tracker name.

    A record the parent did not finish (it was killed, or crashed hard) is finished as failed, with all it got."""
    root = logging.getLogger()
    root.addHandler(_ForwardLogs(answers))
    root.setLevel(logging.INFO)
    started: dict[str, Backend | None] = {}
    while True:
        try:
            name, method, args, wait = requests.recv()
        except EOFError:
            for backend in started.values():
                if backend is not None:
                    with contextlib.suppress(Exception):  # one record's failure must not cost the others
                        backend.finish("failed")
            return
        try:
            if method == "start":
                started[name] = None
                (run,) = args
                backend = run.settings.backend()(run)  # the parent set its settings (tracker.create)
                backend.start()
                started[name] = backend
                result = None
            else:  # after a failed start there is nothing to record; calls do nothing ({} for finish and ref)
                backend = started.get(name)
                result = getattr(backend, method)(*args) if backend is not None else ({} if wait else None)
                if method == "finish":
                    started[name] = None
        except Exception as err:
            try:
                pickle.loads(pickle.dumps(err))
            except Exception:  # it cannot be pickled back: send its type and message
                err = RuntimeError(f"{type(err).__name__}: {err}")
            _answer(answers, "error" if wait else "late_error", err)
            continue
        if wait:
            _answer(answers, "result", result)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles stop signals, then finishes through us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    request_fd, answer_fd = (int(arg) for arg in sys.argv[1:3])
    serve(Connection(request_fd, writable=False), Connection(answer_fd, readable=False))


if __name__ == "__main__":
    main()
