"""The debugging tools as a user runs them: every command of this extension's page (shortened), the doctor failing on
a broken environment, and the doctor in a core install naming the extras left out."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from helpers import PYTHON, REPO, script_env, shell_block_commands
from warm_python import run_python

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[2]  # the extension's folder
# The page's commands, as it shows them, and what shortens each run (the test checks that it works, not its figures)
BENCH, LR = ["--epochs", "1", "--batches", "5"], ["--steps", "15"]
COMMANDS = {
    "make doctor": [],
    "python -m lab.extensions.tools.bench_data data=digits": BENCH,
    # a smaller corpus: the same code path
    "python -m lab.extensions.tools.bench_data experiment=char_lm --workers 0,2 --batch-sizes 32,64": [
        *BENCH,
        "data.max_chars=20000",
    ],
    "python -m lab.extensions.tools.lr_find": LR,
    "python -m lab.extensions.tools.lr_find experiment=diabetes_regression optimizer=sgd --steps 200": LR,
}


def test_the_page_shows_these_commands() -> None:
    assert [command for _, command in shell_block_commands(HERE / "README.md")] == list(COMMANDS)


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m lab.extensions.tools.<name> <args>` as its module's file, run in a fork of the warm interpreter
    (tests/warm_python.py) the way `-m` runs it: a cold start would import torch again for each command."""
    return run_python([str(HERE / f"{name}.py"), *args], cwd=REPO, env=script_env(), timeout=300)


def doctor(*args: str, python: Path | str = PYTHON, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`python -m lab.extensions.tools.doctor`, in an interpreter of its own (`python`: a core install's)."""
    command = [str(python), "-m", "lab.extensions.tools.doctor", *args]
    return subprocess.run(command, cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_page_command(command: str, tmp_path: Path) -> None:
    if command == "make doctor":
        # --no-print-directory: under `make test` this is a nested make, which would print directory lines
        dry = ["make", "--no-print-directory", "-n", "doctor"]
        dry = subprocess.run(dry, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert dry.stdout.strip().endswith("-m lab.extensions.tools.doctor"), dry.stdout
        proc = tool("doctor")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for check in ("python", "support", "torch", "bf16", "tf32", "wandb", "packages"):
            assert re.search(rf"^ok\s+{check}\s", proc.stdout, flags=re.M), (check, proc.stdout)
        # a CUDA build on this GPU-less machine runs, with a word on the CPU build (a CPU build: ok)
        assert re.search(r"^(ok|warn)\s+cuda\s", proc.stdout, flags=re.M), proc.stdout
        # the disk row depends on the machine: a CI machine with under 5 GiB free gets `warn`, which still passes
        assert re.search(r"^(ok|warn)\s+disk\s", proc.stdout, flags=re.M), proc.stdout
        assert proc.stdout.rstrip().endswith("all checks passed")
        return
    args = shlex.split(command)
    assert args[:2] == ["python", "-m"], command
    name = args[2].rpartition(".")[2]
    proc = tool(name, *args[3:], *COMMANDS[command], f"hydra.run.dir={tmp_path}")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{command}\n{output[-4000:]}"
    {"bench_data": bench_data_ran, "lr_find": lr_find_ran}[name](proc.stdout, tmp_path, args)


def bench_data_ran(stdout: str, run_dir: Path, args: list[str]) -> None:
    assert re.search(r"batch_size\s+num_workers\s+pin_memory\s+persistent\s+samples/s", stdout), stdout
    assert stdout.count("<- recommended") == 1
    line = next(line for line in stdout.splitlines() if line.startswith("recommended overrides: "))
    assert re.fullmatch(r"recommended overrides: data\.num_workers=\d+( data\.\w+=\w+)*", line), line
    if "--batch-sizes" in args:
        assert "data.batch_size=" in line
    assert not any(run_dir.iterdir())  # it writes nothing


def lr_find_ran(stdout: str, run_dir: Path, args: list[str]) -> None:
    result = json.loads((run_dir / "lr_find.json").read_text())
    assert 5 <= len(result["lrs"]) <= 15 and result["lrs"] == sorted(result["lrs"])
    assert result["suggestion"] is not None and f"use: optimizer.lr={result['suggestion']:.2e}" in stdout
    assert result["optimizer"] == ("SGD" if "optimizer=sgd" in args else "AdamW")
    assert (run_dir / "lr_find.png").read_bytes().startswith(b"\x89PNG")
    if not any(arg.startswith("logger=") for arg in args):  # the plot is attached to the (offline) wandb run
        assert list(run_dir.glob("wandb/offline-run-*/files/lr_find.png")), sorted(run_dir.rglob("*"))


def test_the_doctor_fails_on_a_broken_environment_naming_the_fixes(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch>=2.4\nno-such-package-here>=1.0\nnumpy<1.0\n")
    proc = doctor(f"--requirements={requirements}", "--min-free-gb=1e9")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^FAIL\s+package no-such-package-here\s+not installed", out, flags=re.M)
    assert re.search(r"^FAIL\s+package numpy\s+\S+ installed, wants numpy<1.0", out, flags=re.M)
    assert re.search(r"^FAIL\s+disk\s", out, flags=re.M)
    assert "3 problem(s):" in out and "make install" in out and "make clean" in out


def test_the_doctor_of_a_core_install_names_the_extras_left_out(core_python: Path, tmp_path: Path) -> None:
    proc = doctor(python=core_python, cwd=tmp_path)
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"extras    not installed: {', '.join(sorted(extras))}" in proc.stdout, proc.stdout
