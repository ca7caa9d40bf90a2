"""The profiler as a user runs it: every command of the README's "Debugging tools" section (shortened: each run
writes into the test's own dir)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from helpers import run_script, shell_block_commands

pytestmark = pytest.mark.slow


def section_commands() -> list[str]:
    return [command for section, command in shell_block_commands() if section == "## Debugging tools"]


def test_the_section_shows_the_profiler() -> None:
    assert any("debug=profile" in command for command in section_commands())


@pytest.mark.parametrize("command", section_commands())
def test_readme_profiler_command(command: str, tmp_path: Path) -> None:
    args = shlex.split(command)
    assert args[:2] == ["python", "scripts/train.py"] and "debug=profile" in args, command
    extra = [f"hydra.run.dir={tmp_path}"]
    if "experiment=char_lm" in args:
        extra.append("data.max_chars=20000")  # a smaller corpus: the same code path
    proc = run_script("train.py", *args[2:], *extra)
    assert proc.returncode == 0, f"{command}\n{(proc.stdout + proc.stderr)[-4000:]}"

    trace, table = tmp_path / "profile_trace.json", tmp_path / "profile_table.txt"
    assert trace.is_file(), "no profile_trace.json: is lab.training.profiling.StepProfiler wired into the trainer?"
    events = json.loads(trace.read_text())["traceEvents"]
    steps = {event["name"] for event in events if event.get("name", "").startswith("ProfilerStep#")}
    active = next((int(a.split("=")[1]) for a in args if a.startswith("trainer.profile.active=")), 3)
    assert len(steps) == active
    assert (
        table.read_text().startswith("profile: bottleneck ") and "top operators by self CPU time" in table.read_text()
    )
    log = (tmp_path / "train.log").read_text()
    assert re.search(r"profile: bottleneck .+ \| data wait \d+%", log)
    assert list(tmp_path.glob("wandb/offline-run-*/files/profile_table.txt"))
