"""tests/warm_python.py: a run forked from the warm server behaves as `python <script>` does for what the
integration tests read (exit code, output, environment, cwd, argv, sys.path, atexit, timeout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from warm_python import run_python

SCRIPT = """
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran"))
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "var": os.environ.get("WARM_TEST_VAR"),
                  "path0": sys.path[0], "extra": os.environ.get("PYTHONPATH") in sys.path, "pid": os.getpid()}))
print("to stderr", file=sys.stderr)
if sys.argv[1:] == ["fail"]:
    raise ValueError("boom")
if sys.argv[1:] == ["message"]:
    sys.exit("a message")
if sys.argv[1:] == ["thread"]:  # a non-daemon thread still running at the end is waited for
    import threading, time
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread ran", flush=True))).start()
if sys.argv[1:] == ["hang"]:
    import time
    time.sleep(600)
sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "bin" / "probe.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


def _both(script, tmp_path, *args, timeout=60):
    env = {**os.environ, "WARM_TEST_VAR": "set", "PYTHONPATH": str(tmp_path / "lib")}
    warm = run_python([str(script), *args], cwd=tmp_path, env=env, timeout=timeout)
    cold = subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    return warm, cold


ENDINGS = {"ok": [], "exit-3": ["3"], "exception": ["fail"], "exit-message": ["message"], "thread": ["thread"]}


@pytest.mark.parametrize("args", ENDINGS.values(), ids=ENDINGS)
def test_a_warm_run_ends_like_a_cold_one(script, tmp_path, args):
    warm, cold = _both(script, tmp_path, *args)
    assert warm.returncode == cold.returncode
    first_warm, first_cold = warm.stdout.splitlines()[0], cold.stdout.splitlines()[0]
    assert first_warm.replace(str(_pid(first_warm)), "") == first_cold.replace(str(_pid(first_cold)), "")
    assert _pid(first_warm) != os.getpid()
    assert warm.stdout.splitlines()[1:] == cold.stdout.splitlines()[1:]  # "thread ran" then "atexit ran"
    assert warm.stdout.rstrip().endswith("atexit ran")
    assert warm.stderr.splitlines()[-1] == cold.stderr.splitlines()[-1]  # "to stderr", or the error's line
    assert warm.stderr.startswith("to stderr") and ("ValueError: boom" in warm.stderr) == (args == ["fail"])


def _pid(line: str) -> int:
    return json.loads(line)["pid"]


def test_a_warm_run_past_its_timeout_is_killed_and_raises(script, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_python([str(script), "hang"], cwd=tmp_path, env=dict(os.environ), timeout=5)
    assert run_python([str(script), "4"], cwd=tmp_path, env=dict(os.environ), timeout=60).returncode == 4
