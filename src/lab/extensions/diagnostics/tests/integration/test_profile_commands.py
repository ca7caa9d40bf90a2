"""The profiler as a user runs it: each command of this extension's page, as written, and what it leaves in the run
dir (the trace of the recorded steps, the table, the bottleneck line in the log, the files attached to wandb)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from helpers import run_script

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README.md"
COMMANDS = (
    "python scripts/train.py debug=profile",
    "python scripts/train.py experiment=char_lm debug=profile callbacks.profile.active=5",
)


def test_the_page_shows_these_commands() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    shown = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert tuple(shown) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_profile_command(command: str, tmp_path: Path) -> None:
    args = shlex.split(command)[2:]
    extra = [f"hydra.run.dir={tmp_path}"]
    if "experiment=char_lm" in args:
        extra.append("data.max_chars=20000")  # a smaller corpus: the same code path
    proc = run_script("train.py", *args, *extra)
    assert proc.returncode == 0, f"{command}\n{(proc.stdout + proc.stderr)[-4000:]}"
    trace, table = tmp_path / "profile_trace.json", tmp_path / "profile_table.txt"
    assert trace.is_file(), "no profile_trace.json: is the profile callback built by the trainer?"
    events = json.loads(trace.read_text())["traceEvents"]
    steps = {event["name"] for event in events if event.get("name", "").startswith("ProfilerStep#")}
    active = next((int(a.split("=")[1]) for a in args if a.startswith("callbacks.profile.active=")), 3)
    assert len(steps) == active
    assert (
        table.read_text().startswith("profile: bottleneck ") and "top operators by self CPU time" in table.read_text()
    )
    log = (tmp_path / "train.log").read_text()
    assert re.search(r"profile: bottleneck .+ \| data wait \d+%", log)
    assert list(tmp_path.glob("wandb/offline-run-*/files/profile_table.txt"))
