"""Dropping extensions, in a copy of this checkout, as a forker does (`make drop EXT=<name>`): each alone, then all
at once. What stays imports and composes; with all of them gone, the core alone passes lint, collects its whole
suite and trains with the README's default command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, checkout_files
from lab import extensions

pytestmark = pytest.mark.slow

# every module of the copy's package imported (a dangling import of a dropped module fails here), and the train
# config composed with every preset of every group the copy still has
IMPORT_ALL = """
import importlib, pkgutil, sys
import lab
for module in pkgutil.walk_packages(lab.__path__, "lab."):
    if ".tests" not in module.name and not module.name.endswith((".conftest", ".__main__")):
        importlib.import_module(module.name)
print("imported")
"""
# then `scripts/train.py --help` in the same process (a process less per extension): composes every group it lists
AND_HELP = """
import runpy
sys.argv = ["scripts/train.py", "--help"]
try:
    runpy.run_path("scripts/train.py", run_name="__main__")
except SystemExit as stop:
    assert not stop.code, f"--help exited with {stop.code}"
print("helped")
"""


def copy_checkout(dest: Path) -> Path:
    if shutil.which("git") is None or shutil.which("make") is None or not (REPO / ".git").exists():
        pytest.skip("needs git, make and a git checkout of the repository")
    for path in checkout_files():
        target = dest / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest


def run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # the copy's src first: its package, not this checkout's (the editable install's) is imported
    env = {**os.environ, "PYTHONPATH": str(cwd / "src"), "WANDB_MODE": "offline"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def drop(copy: Path, name: str) -> None:
    proc = run(["make", "-s", "drop", f"EXT={name}"], copy)
    assert proc.returncode == 0 and not (copy / "src/lab/extensions" / name).exists(), proc.stderr
    assert proc.stdout.startswith(f"dropped {name}"), proc.stdout


def test_each_extension_dropped_alone_leaves_the_rest_importable(tmp_path):
    names = extensions.names()
    if not names:
        pytest.skip("every extension is dropped: nothing left to drop")
    for name in names:
        copy = copy_checkout(tmp_path / name)
        drop(copy, name)
        proc = run([sys.executable, "-c", IMPORT_ALL + AND_HELP], copy)
        assert proc.returncode == 0 and "helped" in proc.stdout, f"without {name}:\n{proc.stderr[-3000:]}"
        shutil.rmtree(copy)


def test_the_core_alone_lints_collects_its_suite_and_trains(tmp_path):
    copy = copy_checkout(tmp_path / "core")
    for name in extensions.names():
        drop(copy, name)
    assert not [p for p in (copy / "src/lab/extensions").iterdir() if p.is_dir() and p.name != "__pycache__"]
    proc = run([sys.executable, "-c", IMPORT_ALL], copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run([sys.executable, "-m", "ruff", "check", "."], copy)
    assert proc.returncode == 0, proc.stdout[-3000:]
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only"], copy)
    assert proc.returncode == 0 and " collected" in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
    run_dir = tmp_path / "run"
    proc = run([sys.executable, "scripts/train.py", "debug=fast", "logger=none", f"hydra.run.dir={run_dir}"], copy)
    assert proc.returncode == 0 and (run_dir / "checkpoints" / "best.pt").is_file(), proc.stderr[-3000:]
