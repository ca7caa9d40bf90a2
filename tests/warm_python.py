"""`python <script> <args>` for the integration tests, started from a warm interpreter instead of a cold one.

A cold start of an entry script spends about 5 s of its 8 on importing torch and torch._dynamo (which the first
optimizer imports); the integration tier starts a few hundred scripts. Each xdist worker therefore keeps one server
process that imported those third-party libraries once, and each run is a fork of it: a process of its own (its own
pid, session, cwd, environment, sys.argv, sys.path and file descriptors 0-2) that runs the script with runpy as
`python <script>` would, and exits through the normal interpreter shutdown (atexit handlers, flushed streams).

Nothing of the project is preloaded: the script imports `lab`, the config schemas and its plugins itself, so a
missing import still fails here as it would for a user. What starts new interpreters (torchrun's ranks, DataLoader
and joblib workers, the tracker's child process) starts them as usual. Commands that are not `python <file.py>`,
and tests whose subject is the interpreter's start (what `--help` imports), use real processes; so does every run
under WARM_PYTHON=0 (`make test ARGS=...` with it set checks that a failure is not the server's doing).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

# heavy, and read no per-run environment at import: torch reads its settings when they are used
PRELOAD = ("numpy", "torch", "torch._dynamo", "hydra", "omegaconf", "sklearn.datasets", "PIL.Image")

_SERVER = r"""
import json, os, runpy, sys
for name in json.loads(sys.argv[1]):
    __import__(name)
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
base_path = sys.path[1:]  # without this server's own sys.path[0]
replies.write("ready\n"), replies.flush()
for line in requests:
    run = json.loads(line)
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the run: a new session (killed as a group), the descriptors a subprocess would have
        os.setsid()
        requests.close(), replies.close()
        for fd, path in ((0, os.devnull), (1, run["stdout"]), (2, run["stderr"])):
            opened = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            os.dup2(opened, fd), os.close(opened)
        os.chdir(run["cwd"])
        os.environ.clear(), os.environ.update(run["env"])
        script = os.path.abspath(run["args"][0])
        extra = [p for p in run["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.path.dirname(script), *map(os.path.abspath, extra), *base_path]
        sys.argv = list(run["args"])
        runpy.run_path(script, run_name="__main__")
        sys.exit(0)
    replies.write(json.dumps({"pid": pid}) + "\n"), replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n"), replies.flush()
"""


class _Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(PRELOAD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        self.lock = threading.Lock()
        self.received = b""  # read with os.read: a buffered reader could hold a reply that select() then misses
        if self._reply(None) != "ready":
            raise RuntimeError("the warm python server did not start (see the worker's stderr)")
        atexit.register(self.close)

    def _reply(self, deadline: float | None) -> str | None:
        """The server's next line, or None when `deadline` (time.monotonic()) passed first."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.received:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the warm python server exited (code {self.proc.wait()})")
            self.received += chunk
        line, self.received = self.received.split(b"\n", 1)
        return line.decode()

    def run(self, args: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        with self.lock, tempfile.TemporaryDirectory(prefix="warm-run-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            out.touch(), err.touch()
            request = {"args": list(args), "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = json.loads(self._reply(None))["pid"]
            reply = self._reply(time.monotonic() + timeout)
            if reply is None:  # as subprocess.run(timeout=) does: kill it (with what it started), then raise
                os.killpg(pid, signal.SIGKILL)
                self._reply(None)
                raise subprocess.TimeoutExpired(list(args), timeout, out.read_text(), err.read_text())
            returncode = json.loads(reply)["returncode"]
            return subprocess.CompletedProcess(list(args), returncode, out.read_text(), err.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


_server: _Server | None = None


def run_python(args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run([sys.executable, *args], cwd=, env=, capture_output=True, text=True, timeout=) with the same
    result, run in a fork of this worker's warm server when args[0] is a .py file."""
    if not str(args[0]).endswith(".py") or os.environ.get("WARM_PYTHON") == "0":
        command = [sys.executable, *args]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    return _server.run([str(arg) for arg in args], cwd, env, timeout)
