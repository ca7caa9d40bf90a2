"""`python <script> <args>` for the integration tests, started from a warm interpreter instead of a cold one.

A cold start of an entry script spends about 5 s of its 8 on importing torch and torch._dynamo (which the first
optimizer imports); the integration tier starts a few hundred scripts. Each xdist worker therefore keeps a server
process that imported those libraries once, and each run is a fork of it: a process of its own (its own pid,
session, cwd, environment, sys.argv, sys.path, the sitecustomize module that path holds, and file descriptors 0-2)
that runs the script with runpy as `python <script>` would, and ends as the interpreter's shutdown ends it for
what a run can observe: non-daemon threads joined, atexit handlers run, streams flushed, the exit status of
`sys.exit` or of an uncaught exception.
It then skips the rest of that shutdown, the teardown of every module, which in a fork writes to every page the
preloads filled (copy-on-write): about 2.5 s of CPU per run, more than the run of a `debug=fast` training itself.

A run that would import this repository's `lab` (src/, unchanged during a session) finds it imported as well (the
config schemas, the CLI, the four workflows) and one config composed (the parsers' tables built). A run that would
import another `lab` (test_extension's fork, whose files the test writes) goes to a server that preloaded nothing
of the project, so that the fork's modules, and a missing import, load as they would for a user.

What starts new interpreters (torchrun's ranks, DataLoader and joblib workers, the tracker's child process) starts
them as usual. Commands that are not `python <file.py>`, and tests whose subject is the interpreter's start (what
`--help` imports), use real processes; so does every run under WARM_PYTHON=0 (`make test ARGS=...` with it set
checks that a failure is not the server's doing). WARM_PYTHON_LOG=<file> appends each warm run's test, arguments
and CPU seconds to <file>, to find what the suite spends its time on.
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
SRC = Path(__file__).resolve().parents[1] / "src"  # this repository's `lab`
PRELOAD_LAB = (
    "lab.cli",
    "lab.workflows.train",
    "lab.workflows.evaluate",
    "lab.workflows.export",
    "lab.workflows.infer",
)
# One composition: the first parses of an override or an interpolation build the parsers' lookup tables (antlr's
# DFA cache, about 0.4 s); a fork then starts with them built, as a user's second composition in one process does.
WARM_UP_LAB = f"""
from hydra import compose, initialize_config_dir
with initialize_config_dir(config_dir={str(SRC.parent / "conf")!r}, version_base="1.3"):
    compose("train", overrides=["debug=fast", "model=mlp", "optimizer.lr=0.01"])
"""

_SERVER = r"""
import atexit, importlib.util, json, os, runpy, sys
base_path = sys.path[1:]  # without this server's own sys.path[0]
src, modules, warm_up = json.loads(sys.argv[1])
sys.path[:0] = [src] if src else []
for name in modules:
    __import__(name)
exec(warm_up)
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
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
        try:
            sys.modules.pop("sitecustomize", None)  # what `site` imports from the run's path as python starts
            if importlib.util.find_spec("sitecustomize") is not None:
                import sitecustomize
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as end:
            code = end.code
            if code is not None and not isinstance(code, int):  # sys.exit("message"): printed, status 1
                print(code, file=sys.stderr)
                code = 1
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        # the interpreter's shutdown in its order, up to the teardown of the modules (see the docstring)
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code or 0)
    replies.write(json.dumps({"pid": pid}) + "\n"), replies.flush()
    _, status, usage = os.wait4(pid, 0)
    ended = {"returncode": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}
    replies.write(json.dumps(ended) + "\n"), replies.flush()
"""


class _Server:
    def __init__(self, with_lab: bool) -> None:
        preload = [str(SRC), [*PRELOAD, *PRELOAD_LAB], WARM_UP_LAB] if with_lab else [None, PRELOAD, ""]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(preload)],
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
            ended = json.loads(reply)
            _log_run(args, ended["cpu"])
            return subprocess.CompletedProcess(list(args), ended["returncode"], out.read_text(), err.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


_servers: dict[bool, _Server] = {}  # with this repository's lab preloaded, and without


def _log_run(args: Sequence[str], cpu: float) -> None:
    """WARM_PYTHON_LOG: one JSON line per run (the test, the arguments, the CPU seconds of the run and of the
    processes it waited for)."""
    if path := os.environ.get("WARM_PYTHON_LOG"):
        record = {"test": os.environ.get("PYTEST_CURRENT_TEST"), "args": list(args), "cpu": round(cpu, 2)}
        with open(path, "a") as log:
            log.write(json.dumps(record) + "\n")


def run_python(args: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run([sys.executable, *args], cwd=, env=, capture_output=True, text=True, timeout=) with the same
    result, run in a fork of this worker's warm server when args[0] is a .py file."""
    if not str(args[0]).endswith(".py") or os.environ.get("WARM_PYTHON") == "0":
        command = [sys.executable, *args]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with_lab = _imports_this_lab(Path(cwd, args[0]), cwd, env)
    if with_lab not in _servers or _servers[with_lab].proc.poll() is not None:
        _servers[with_lab] = _Server(with_lab)
    return _servers[with_lab].run([str(arg) for arg in args], cwd, env, timeout)


def _imports_this_lab(script: Path, cwd: Path, env: dict[str, str]) -> bool:
    """Whether `import lab` in the run finds this repository's src/lab first: on the path the run gets (the script's
    folder, then PYTHONPATH; the rest of the path, the venv's, is the server's and names this one)."""
    extra = [Path(cwd, entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    for folder in [script.parent, *extra]:
        if (folder / "lab" / "__init__.py").is_file():
            return folder.resolve() == SRC
    return True
