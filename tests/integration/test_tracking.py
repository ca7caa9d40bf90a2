"""Every run's wandb record holds its resolved config, git commit and metrics (read back from the offline files);
the code's provenance includes untracked files; a run dir's records hold one run (a resume appends, overwrite=true
starts afresh)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import time

import pytest
from omegaconf import OmegaConf

from helpers import REPO, script_env
from wandb_reader import find_run_files, read_run
from warm_python import run_python

pytestmark = pytest.mark.slow


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def project_copy(tmp_path):
    """The template as a fresh git checkout of its own, so the commit under test is one this test made."""
    repo = tmp_path / "repo"
    for part in ("conf", "src", "scripts"):
        shutil.copytree(REPO / part, repo / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # its .gitignore too: the bytecode a run writes (__pycache__/) is no untracked change of the code
    shutil.copyfile(REPO / ".gitignore", repo / ".gitignore")
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "snapshot", cwd=repo)
    return repo


def _isolated_env(tmp_path, **extra):
    env = script_env()
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_PROJECT"):
        env.pop(key, None)
    env["NETRC"] = str(tmp_path / "no-netrc")
    env.update(extra)
    return env


def _python(*args, env, cwd=REPO, timeout=300):
    """Run `python <args>` and require success."""
    proc = run_python(args, cwd=cwd, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _train(repo, run_dir, *overrides, env, cwd):
    return _python(str(repo / "scripts/train.py"), f"hydra.run.dir={run_dir}", *overrides, env=env, cwd=cwd)


def test_train_run_records_config_commit_dirty_flag_and_metrics(project_copy, tmp_path):
    # run from another directory, importing the copy's package: provenance must come from the code's checkout
    env = _isolated_env(tmp_path, PYTHONPATH=str(project_copy / "src"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    head = _git("rev-parse", "HEAD", cwd=project_copy)
    overrides = [
        "model=mlp",
        "model.hidden_dims=[32]",
        "optimizer.lr=0.002",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=5",
        "tags=[smoke]",
    ]
    clean = tmp_path / "clean"
    _train(project_copy, clean, *overrides, env=env, cwd=elsewhere)

    (run_file,) = find_run_files(clean / "wandb")
    run = read_run(run_file)
    assert run.git_commit == head and run.job_type == "train" and run.tags == ["smoke"]
    assert run.config["provenance"] == {
        "git_commit": head,
        "git_branch": _git("branch", "--show-current", cwd=project_copy),
        "git_dirty": False,
    }
    # resolved as the run resolved it (optimized_metric: val/${task.monitor}_best -> val/acc_best)
    hydra_config = OmegaConf.to_container(OmegaConf.load(clean / ".hydra/config.yaml"), resolve=True)
    for key, value in hydra_config.items():
        assert run.config[key] == value, key
    assert run.config["model"]["hidden_dims"] == [32] and run.config["optimizer"]["lr"] == 0.002
    assert "optimizer.lr=0.002" in run.config["hydra_overrides"]

    train_rows = [row for row in run.history if "train/loss" in row]
    assert [row["_step"] for row in train_rows] == [5, 10, 15, 20, 25, 30, 35]  # 19 steps/epoch x 2
    val_rows = [row for row in run.history if "val/acc" in row]
    assert [(row["_step"], row["epoch"]) for row in val_rows] == [(19, 1), (38, 2)]
    summary = json.loads((clean / "summary.json").read_text())
    assert run.summary["val/acc_best"] == summary["val/acc_best"] > 0.5
    assert summary["wandb_id"] == run.run_id and summary["git_commit"] == head and summary["git_dirty"] is False
    assert run.exit_code == 0

    # a modified file and a model added as a new, untracked file: dirty flag, and both are kept with the run
    with open(project_copy / "conf/experiment/digits_mlp.yaml", "a") as handle:
        handle.write("# local tweak under test\n")
    (project_copy / "src/lab/models/added_under_test.py").write_text('"""A model added as a new file."""\n')
    dirty = tmp_path / "dirty"
    _train(project_copy, dirty, *overrides, "trainer.max_epochs=1", env=env, cwd=elsewhere)
    run = read_run(find_run_files(dirty / "wandb")[0])
    assert run.git_commit == head and run.config["provenance"]["git_dirty"] is True
    diff = (dirty / "provenance/git.diff").read_text()
    assert "+# local tweak under test" in diff
    assert '+++ b/src/lab/models/added_under_test.py\n@@ -0,0 +1 @@\n+"""A model added as a new file."""\n' in diff
    assert (find_run_files(dirty / "wandb")[0].parent / "files/provenance/git.diff").is_file()


def test_outside_a_git_checkout_the_run_says_so(project_copy, tmp_path):
    shutil.rmtree(project_copy / ".git")
    env = _isolated_env(tmp_path, PYTHONPATH=str(project_copy / "src"))
    proc = _train(project_copy, tmp_path / "run", "debug=fast", "model=mlp", env=env, cwd=tmp_path)
    env_json = json.loads((tmp_path / "run/provenance/env.json").read_text())
    assert env_json["git_commit"] is None and "not a git checkout" in env_json["git_note"]
    assert proc.returncode == 0


# a sweep's jobs as separate wandb runs in one group, named by their overrides, best.pt as a model artifact: the grid
# sweep of tests/integration/test_sweeps.py checks them on its runs


def test_logger_none_never_touches_wandb(tmp_path):
    env = _isolated_env(tmp_path)
    proc = _python(
        "-X",
        "importtime",
        "scripts/train.py",
        f"hydra.run.dir={tmp_path}/run",
        "debug=fast",
        "model=mlp",
        "logger=none",
        env=env,
    )
    assert " wandb" not in proc.stderr  # -X importtime lists every module imported
    assert not (tmp_path / "run/wandb").exists()
    assert (tmp_path / "run/metrics.jsonl").is_file() and (tmp_path / "run/provenance/env.json").is_file()


def test_online_without_credentials_falls_back_to_offline_quickly(tmp_path):
    env = _isolated_env(tmp_path, WANDB_BASE_URL="http://127.0.0.1:9")  # nothing listens there
    start = time.monotonic()
    proc = _python(
        "scripts/train.py",
        f"hydra.run.dir={tmp_path}/run",
        "debug=fast",
        "model=mlp",
        "logger.wandb.mode=online",
        "logger.wandb.init_timeout=5",
        env=env,
        timeout=120,
    )
    assert time.monotonic() - start < 60
    assert "logging offline instead" in proc.stdout + proc.stderr
    (run_file,) = find_run_files(tmp_path / "run/wandb")  # only the offline run, no half-made online one
    assert read_run(run_file).exit_code == 0
    assert os.path.basename(run_file.parent).startswith("offline-run-")


def test_a_resume_appends_to_its_records_and_overwrite_starts_them_afresh(tmp_path):
    env = _isolated_env(tmp_path)
    run_dir = tmp_path / "run"
    small = ["model=mlp", "trainer.log_every_n_steps=5", "logger=csv", f"hydra.run.dir={run_dir}"]
    _python("scripts/train.py", *small, "trainer.max_epochs=1", env=env)
    with open(run_dir / "metrics.jsonl", "a") as jsonl, open(run_dir / "csv/metrics.csv", "a") as rows:
        jsonl.write('{"step": 99, "train/lo')  # the process was killed mid-write
        rows.write("99,1,0.")
    last = run_dir / "checkpoints/last.pt"
    proc = _python("scripts/train.py", *small, "trainer.max_epochs=2", f"ckpt_path={last}", env=env)
    assert (proc.stdout + proc.stderr).count("dropped a last line cut short") == 2
    steps = _steps(run_dir)
    assert steps[0] == steps[1] == [5, 10, 15, 19, 19, 20, 25, 30, 35, 38, 38]  # one run, continued
    assert sorted(p.name for p in (run_dir / "provenance").iterdir()) == ["attempt-2", "env.json", "git.diff"]

    _python("scripts/train.py", *small, "trainer.max_epochs=1", "overwrite=true", env=env)
    assert _steps(run_dir) == ([5, 10, 15, 19, 19], [5, 10, 15, 19, 19])  # the new run alone
    assert sorted(p.name for p in (run_dir / "provenance").iterdir()) == ["env.json", "git.diff"]


def _steps(run_dir):
    """Steps of metrics.jsonl and csv/metrics.csv (every line read back whole)."""
    local = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    with open(run_dir / "csv/metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(None not in row for row in rows)  # no row longer than the header: nothing glued on
    return local, [int(row["step"]) for row in rows]
