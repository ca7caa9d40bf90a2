"""The debugging tools as a user runs them: every command of the README's "Debugging tools" section (shortened), and
the doctor failing on a broken environment."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from helpers import PYTHON, REPO, run_script

pytestmark = pytest.mark.slow

# what shortens each tool's run: the test checks that it works, not its figures
SHORTER = {
    "bench_data.py": ["--epochs", "1", "--batches", "5"],
    "lr_find.py": ["--steps", "15"],
    "train.py": [],
}


def section_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Debugging tools\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_section_shows_each_tool() -> None:
    commands = section_commands()
    for tool in ("make doctor", "scripts/bench_data.py", "scripts/lr_find.py", "debug=profile"):
        assert any(tool in command for command in commands), tool


@pytest.mark.parametrize("command", section_commands())
def test_readme_debugging_command(command: str, tmp_path: Path) -> None:
    if command == "make doctor":
        # --no-print-directory: under `make test` this is a nested make, which would print directory lines
        dry = ["make", "--no-print-directory", "-n", "doctor"]
        dry = subprocess.run(dry, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0 and dry.stdout.strip().endswith("scripts/doctor.py"), dry.stdout + dry.stderr
        proc = run_script("doctor.py")
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
    assert args[0] == "python" and args[1].startswith("scripts/"), command
    script = args[1].removeprefix("scripts/")
    extra = [*SHORTER[script], f"hydra.run.dir={tmp_path}"]
    if "experiment=char_lm" in args:
        extra.append("data.max_chars=20000")  # a smaller corpus: the same code path
    proc = run_script(script, *args[2:], *extra)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{command}\n{output[-4000:]}"
    {"bench_data.py": bench_data_ran, "lr_find.py": lr_find_ran, "train.py": profile_ran}[script](
        proc.stdout, tmp_path, args
    )


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


def profile_ran(stdout: str, run_dir: Path, args: list[str]) -> None:
    trace, table = run_dir / "profile_trace.json", run_dir / "profile_table.txt"
    assert trace.is_file(), "no profile_trace.json: is lab.training.profiling.StepProfiler wired into the trainer?"
    events = json.loads(trace.read_text())["traceEvents"]
    steps = {event["name"] for event in events if event.get("name", "").startswith("ProfilerStep#")}
    active = next((int(a.split("=")[1]) for a in args if a.startswith("trainer.profile.active=")), 3)
    assert len(steps) == active
    assert (
        table.read_text().startswith("profile: bottleneck ") and "top operators by self CPU time" in table.read_text()
    )
    log = (run_dir / "train.log").read_text()
    assert re.search(r"profile: bottleneck .+ \| data wait \d+%", log)
    assert list(run_dir.glob("wandb/offline-run-*/files/profile_table.txt"))


def test_the_doctor_fails_on_a_broken_environment_naming_the_fixes(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("torch>=2.4\nno-such-package-here>=1.0\nnumpy<1.0\n")
    proc = subprocess.run(
        [PYTHON, "scripts/doctor.py", f"--requirements={requirements}", "--min-free-gb=1e9"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^FAIL\s+package no-such-package-here\s+not installed", out, flags=re.M)
    assert re.search(r"^FAIL\s+package numpy\s+\S+ installed, wants numpy<1.0", out, flags=re.M)
    assert re.search(r"^FAIL\s+disk\s", out, flags=re.M)
    assert "3 problem(s):" in out and "make install" in out and "make clean" in out
