"""README's "Add your own model, dataset or task", followed literally in a copy of the repository: its files are
written as new files (nothing existing is edited), then its commands train, evaluate, export and infer."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO

pytestmark = pytest.mark.slow
SECTION = "## Add your own model, dataset or task"


def _section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def _files(section: str) -> dict[str, str]:
    """path -> content of every ```python / ```yaml block whose first line is `# <path>`."""
    blocks = re.findall(r"```(?:python|yaml)\n# (\S+)\n(.*?)```", section, flags=re.S)
    return {path: f"# {path}\n{body}" for path, body in blocks}


def _commands(section: str) -> list[str]:
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_a_new_model_dataset_and_task_are_new_files_only_and_run_through_every_script(tmp_path):
    fork = tmp_path / "fork"
    for name in ("src", "conf", "scripts"):
        shutil.copytree(REPO / name, fork / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    files = _files(_section())
    assert {Path(p).parts[0] for p in files} == {"src", "conf"} and len(files) == 6
    for path, content in files.items():
        target = fork / path
        assert not target.exists(), f"{path} exists already: the README must need new files only"
        target.write_text(content)

    np.save(fork / "rows.npy", np.random.default_rng(0).integers(0, 2, (5, 12)).astype(np.float32))
    env = {**os.environ, "PYTHONPATH": str(fork / "src"), "WANDB_MODE": "offline"}
    run = fork / "outputs/train/run"
    for index, command in enumerate(_commands(_section())):
        args = shlex.split(command.replace("outputs/train/<run>", str(run)))
        args[0] = sys.executable
        args.append(f"hydra.run.dir={run if 'train.py' in args[1] else fork / f'outputs/step{index}'}")
        proc = subprocess.run(args, cwd=fork, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"

    summary = json.loads((run / "summary.json").read_text())
    assert summary["val/exact_match_best"] > 0.5  # learns: 3 labels all right for most samples
    evaluated = json.loads((fork / "outputs/step1/eval.json").read_text())
    assert evaluated["task"] == "multilabel" and set(evaluated["metrics"]) == {"loss", "exact_match"}
    manifest = json.loads((fork / "outputs/step2/export_manifest.json").read_text())
    assert {a["status"] for a in manifest["artifacts"].values()} == {"ok"}
    predictions = json.loads((fork / "outputs/step3/predictions.json").read_text())["predictions"]
    assert len(predictions) == 5 and all(len(p["output"]) == 3 for p in predictions)
