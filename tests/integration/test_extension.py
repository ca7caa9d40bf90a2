"""docs/extending.md's "Add your own model, dataset or task", followed literally in a copy of the repository: its
files are written as new files (nothing existing is edited), then its commands train, evaluate, export and infer."""

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
from warm_python import run_python

pytestmark = pytest.mark.slow
SECTION = "## Add your own model, dataset or task"


def _section() -> str:
    text = (REPO / "docs" / "extending.md").read_text()
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


def _fork(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the repository with the page's new files written in (none of them may exist already)."""
    fork = tmp_path / "fork"
    for name in ("src", "conf", "scripts"):
        shutil.copytree(REPO / name, fork / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    files = _files(_section())
    assert {Path(p).parts[0] for p in files} == {"src"} and len(files) == 5  # four options and the task's class
    for path, content in files.items():
        target = fork / path
        assert not target.exists(), f"{path} exists already: the page must need new files only"
        target.write_text(content)
    return fork, {**os.environ, "PYTHONPATH": str(fork / "src"), "WANDB_MODE": "offline"}


def _train(fork: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_python(["scripts/train.py", *args], cwd=fork, env=env, timeout=600)


def test_a_new_model_dataset_and_task_are_new_files_only_and_run_through_every_script(tmp_path):
    fork, env = _fork(tmp_path)
    np.save(fork / "rows.npy", np.random.default_rng(0).integers(0, 2, (5, 12)).astype(np.float32))
    run = fork / "outputs/train/run"
    for index, command in enumerate(_commands(_section())):
        args = shlex.split(command.replace("outputs/train/<run>", str(run)))
        args[0] = sys.executable
        args.append(f"hydra.run.dir={run if 'train.py' in args[1] else fork / f'outputs/step{index}'}")
        proc = run_python(args[1:], cwd=fork, env=env, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"

    summary = json.loads((run / "summary.json").read_text())
    assert summary["val/exact_match_best"] > 0.5  # learns: 3 labels all right for most samples
    # callback=stop_at: the run ends at the first validation that reaches the target, or trains every epoch
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    validations = [(r["epoch"], r["val/exact_match"]) for r in records if "val/exact_match" in r]
    reached = [epoch for epoch, value in validations if value >= 0.95]
    assert validations[-1][0] == (reached[0] if reached else 20), validations
    evaluated = json.loads((fork / "outputs/step1/eval.json").read_text())
    assert evaluated["task"] == "multilabel" and set(evaluated["metrics"]) == {"loss", "exact_match"}
    manifest = json.loads((fork / "outputs/step2/export_manifest.json").read_text())
    assert {a["status"] for a in manifest["artifacts"].values()} == {"ok"}
    predictions = json.loads((fork / "outputs/step3/predictions.json").read_text())["predictions"]
    assert len(predictions) == 5 and all(len(p["output"]) == 3 for p in predictions)


def test_the_pages_files_and_the_readmes_model_pass_the_projects_lint(tmp_path):
    """A fork that copies them keeps `make lint` green: ruff and mypy with the project's settings (every function
    typed, a fork's too). README's model is the page's, word for word."""
    fork, _ = _fork(tmp_path)
    shutil.copy(REPO / "pyproject.toml", fork / "pyproject.toml")
    files = _files(_section())
    readme = re.findall(r"```python\n# (\S+)\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    assert readme and all(files.get(path) == f"# {path}\n{body}" for path, body in readme)
    for tool in (["ruff", "check"], ["ruff", "format", "--check"], ["mypy"]):
        proc = subprocess.run(
            [sys.executable, "-m", *tool, *files], cwd=fork, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"{' '.join(tool)}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"


def test_a_new_option_takes_its_keys_without_plus_and_a_preset_yaml_holds_only_what_differs(tmp_path):
    fork, env = _fork(tmp_path)
    options = ["task=multilabel", "data=bits", "model=gated_mlp"]
    listed = _train(fork, env, "--help")
    assert re.search(r"^model: .*\bgated_mlp\b", listed.stdout, re.M) and re.search(
        r"^data: .*\bbits\b", listed.stdout, re.M
    )

    # the option's own keys, with no `+`, typed by its class; its defaults fill what the command line leaves
    composed = _train(fork, env, *options, "model.hidden=128", "data.num_bits=16", "--cfg", "job")
    assert composed.returncode == 0, composed.stderr
    assert (
        "hidden: 128" in composed.stdout
        and "num_bits: 16" in composed.stdout
        and "num_samples: 2000" in composed.stdout
    )

    # a preset of the new option: its YAML holds only the value that differs
    (fork / "conf/model").mkdir(exist_ok=True)  # every shipped model is a class: no conf/model/ until a preset
    (fork / "conf/model/gated_mlp_wide.yaml").write_text("defaults:\n  - gated_mlp\n\nhidden: 256\n")
    preset = _train(fork, env, *options[:2], "model=gated_mlp_wide", "--cfg", "job")
    assert preset.returncode == 0, preset.stderr
    assert "name: gated_mlp" in preset.stdout and "hidden: 256" in preset.stdout and "freeze: []" in preset.stdout

    # mistakes across options are one line each, before any work
    for mistake, named in [
        (["data=digits", "data.num_bits=5"], "data.num_bits"),  # another option's key
        ([*options, "model.hidden=wide"], "model.hidden"),  # a wrong type
        ([*options[:2], "model=gated_mpl"], "model=gated_mpl"),  # a misspelt option
        ([*options, "callback=stop_at", "callbacks.stop_at.targt=1"], "targt"),  # a callback's misspelt key
    ]:
        proc = _train(fork, env, *mistake, "--cfg", "job")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and named in lines[0] and len(lines) <= 2, proc.stderr

    # `+`/`++` overrides in a sweep, beside the new option's keys
    sweep = tmp_path / "sweep"
    proc = _train(
        fork,
        env,
        "-m",
        *options,
        "model.hidden=8,16",
        "++data.num_samples=300",
        "+callbacks.early_stopping={patience: 3}",
        "logger=none",
        "trainer.max_epochs=1",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()) == ["0", "1"]
