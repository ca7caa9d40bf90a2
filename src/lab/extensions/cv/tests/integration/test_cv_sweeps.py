"""Cross-validation through the real script: 3 folds of digits and of diabetes, a killed CV sweep resumed, Optuna
over cross-validated scores, and the one-line refusal without -m."""

from __future__ import annotations

import csv
import json
import os
import shlex
import statistics
from pathlib import Path

import pytest
import torch

from helpers import REPO, script_env
from lab import extensions
from lab.data import bundled
from lab.data.common import train_val_test
from lab.data.options import DiabetesConfig, DigitsConfig
from sweep_runs import QUICK, assert_ok, run_sweep, summary_rows, sweep_job

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README.md"
# the page's ```sh commands, as written (test_readme checks that each line of them is quoted here); the tests run
# them with 3 folds (2 for Optuna) and one learning rate
FOLDS = "python scripts/train.py -m cv.folds=5"
REGRESSION = "python scripts/train.py -m experiment=diabetes_regression cv.folds=5 optimizer.lr=1e-3,3e-3"
SEARCH = "python scripts/train.py hparams_search=optuna cv.folds=3"
RESUME = "python scripts/train.py -m cv.folds=5 hydra.sweep.dir=outputs/train/multirun/<stamp> resume=auto"
CV = ["cv.folds=3", "logger=none"]


def _page_args(command: str, *shorter: str) -> list[str]:
    """A command of the page, checked to be there as written: its arguments after `python scripts/train.py`, less
    -m and those of the keys in `shorter`, which replace them."""
    assert command in PAGE.read_text(), command
    python, script, *args = shlex.split(command)
    assert (python, script) == ("python", "scripts/train.py"), command
    keys = {s.split("=", 1)[0] for s in shorter}
    return [a for a in args if a != "-m" and a.split("=", 1)[0] not in keys] + list(shorter)


def _sets(sweep) -> list[dict]:
    with open(sweep / "sweep_summary_sets.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _check_folds(sweep, pool: set[int], folds: int) -> None:
    """Each job's fold.json: disjoint train/val covering the pool (so never the test split), each sample validated
    once across the folds."""
    validated: list[int] = []
    for job in range(folds):
        record = sweep_job(sweep, job, "fold.json")
        train, val = set(record["train"]), set(record["val"])
        assert record["fold"] == job and not train & val and train | val == pool, job
        validated += record["val"]
    assert sorted(validated) == sorted(pool)


def _check_means(sweep, metric: str) -> None:
    """The parameter set's row is the mean and population std of its jobs' summary.json values."""
    (row,) = _sets(sweep)
    jobs = [sweep_job(sweep, n) for n in range(3)]
    assert row["jobs"] == "0 1 2" and row["status"] == "completed"
    assert float(row[metric]) == pytest.approx(statistics.fmean(job[metric] for job in jobs))
    for key in (metric, "val/loss"):
        values = [job[key] for job in jobs]
        assert float(row[f"{key}_mean"]) == pytest.approx(statistics.fmean(values))
        assert float(row[f"{key}_std"]) == pytest.approx(statistics.pstdev(values))


def _pool(data, labels) -> set[int]:
    train, val, _ = train_val_test(labels, data)
    return set(torch.cat([train, val]).tolist())


def test_three_folds_of_digits(tmp_path):
    sweep = tmp_path / "digits"
    proc = run_sweep(sweep, *QUICK, *_page_args(FOLDS, *CV))
    assert_ok(proc)
    assert [row["status"] for row in summary_rows(sweep)] == ["completed"] * 3
    _check_folds(sweep, _pool(DigitsConfig(), torch.from_numpy(bundled.digits()[1]).long()), 3)
    assert all(sweep_job(sweep, n, "fold.json")["stratified"] for n in range(3))
    _check_means(sweep, "val/acc_best")
    assert "val/acc_best=" in proc.stdout and "(mean)" in proc.stdout
    assert "## Parameter sets" in (sweep / "sweep_summary.md").read_text()


def test_three_folds_of_a_regression(tmp_path):
    sweep = tmp_path / "diabetes"
    assert_ok(run_sweep(sweep, *_page_args(REGRESSION, "optimizer.lr=1e-3", *CV), "debug=fast"))
    _check_folds(sweep, _pool(DiabetesConfig(), torch.zeros(442, dtype=torch.long)), 3)
    assert not sweep_job(sweep, 0, "fold.json")["stratified"]  # no classes to stratify by
    _check_means(sweep, "val/rmse_best")


@pytest.mark.parametrize(("signal", "code"), [("KILL", -9), ("TERM", 143)])
def test_a_killed_cv_sweep_resumes_with_its_unfinished_folds(tmp_path, signal, code):
    """SIGKILL: fold 1 left no checkpoint and runs again from the start. SIGTERM: it saved last.pt and stopped, and
    continues from it. Either way it ends with the weights of the fold run uninterrupted."""
    sweep = tmp_path / "killed"
    recipe = [*QUICK, *_page_args(FOLDS, *CV), "trainer.max_epochs=2"]
    command = [*recipe, "+callbacks.kill_job={}"]
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests" / "integration" / "plugins")
    # fold 1 (job 1) signals the sweep's process after its first epoch's validation: fold 0 finished, fold 2 never
    # started
    proc = run_sweep(sweep, *command, env={**env, "KILL_JOB": "1", "KILL_SIGNAL": signal})
    assert proc.returncode == code, proc.stderr[-3000:]
    assert (sweep / "1" / "checkpoints" / "last.pt").is_file() == (signal == "TERM")
    assert sweep_job(sweep, 0, "sweep_job.json")["status"] == "completed" and not (sweep / "2").exists()
    stopped = sweep / "1" / "summary.json"  # SIGTERM's run records that it stopped
    assert not stopped.exists() or json.loads(stopped.read_text())["status"] != "completed"
    first = (sweep / "0" / "sweep_job.json").read_text()

    # the page's resume: the same command, its sweep dir (run_sweep passes this one's) and resume=auto
    *same, sweep_dir, resume = _page_args(RESUME)
    assert same == _page_args(FOLDS) and sweep_dir.startswith("hydra.sweep.dir=") and resume == "resume=auto"
    proc = run_sweep(sweep, *command, resume, env={**env, "KILL_JOB": "-1"})
    assert_ok(proc)
    assert (sweep / "0" / "sweep_job.json").read_text() == first  # fold 0 kept, not run again
    assert [row["status"] for row in summary_rows(sweep)] == ["completed"] * 3
    assert "job #0 completed earlier" in proc.stderr + proc.stdout
    continued = f"continuing the run in {sweep}/1" in (sweep / "1" / "train.log").read_text()
    assert continued == (signal == "TERM")
    _check_means(sweep, "val/acc_best")

    # the fold run again ends with the weights of that fold run uninterrupted (a sweep of its one job)
    alone = tmp_path / "alone"
    assert_ok(run_sweep(alone, *recipe, "cv.fold=1"))
    assert sweep_job(alone, 0, "fold.json")["val"] == sweep_job(sweep, 1, "fold.json")["val"]
    resumed, straight = (
        torch.load(d / "checkpoints" / "last.pt", weights_only=True) for d in (sweep / "1", alone / "0")
    )
    assert resumed["model"].keys() == straight["model"].keys()
    for key, value in straight["model"].items():
        assert torch.equal(value, resumed["model"][key]), f"{key} differs after the resume"


# hparams_search=optuna comes with another extension, which a fork may drop, and optuna with its extra
OPTUNA = any((conf / "hparams_search" / "optuna.yaml").is_file() for conf in extensions.conf_dirs())


@pytest.mark.skipif(not OPTUNA, reason="no hparams_search=optuna preset in this tree")
def test_optuna_searches_over_cross_validated_scores(tmp_path):
    optuna = pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path}/optuna.db"
    search = ["hparams_search=optuna", f"hydra.sweeper.storage={storage}", "hydra.sweeper.n_trials=2"]
    sweep = tmp_path / "search"
    args = [*search, "hydra.sweeper.study_name=cv", "hydra.sweeper.pruner=null", "cv.folds=2"]
    assert_ok(run_sweep(sweep, *QUICK, "logger=none", *_page_args(SEARCH, *args), multirun=False))
    trials = optuna.load_study(study_name="cv", storage=storage).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for trial in trials:  # trial t ran jobs 2t and 2t+1, folds 0 and 1; its value is their mean
        jobs = [sweep_job(sweep, 2 * trial.number + fold) for fold in (0, 1)]
        assert [sweep_job(sweep, 2 * trial.number + f, "fold.json")["fold"] for f in (0, 1)] == [0, 1]
        assert trial.value == pytest.approx(statistics.fmean(job["val/acc_best"] for job in jobs))
    by_value = {round(float(row["val/acc_best"]), 6) for row in _sets(sweep)}
    assert by_value == {round(t.value, 6) for t in trials}


def test_cv_without_a_multirun_is_refused_in_one_line(tmp_path):
    run_dir = tmp_path / "single"
    proc = run_sweep(tmp_path, *QUICK, *CV, f"hydra.run.dir={run_dir}", multirun=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: cv.folds=3 needs a multirun, one job per fold: add -m (python scripts/train.py -m cv.folds=3)"
    )
    assert not run_dir.exists()


def test_a_dataset_with_its_own_validation_split_is_refused_in_one_line(tmp_path):
    sweep = tmp_path / "synthetic"
    proc = run_sweep(sweep, "data=synthetic", *QUICK, "cv.folds=2", "logger=none")
    assert proc.returncode == 1
    refusal = (
        "ConfigError: data=synthetic has its own validation split, so cv.folds=2 cannot split its train+val pool; "
        "use a dataset split by data.val_fraction (digits, diabetes, csv)"
    )
    assert proc.stderr.count(refusal) >= 2  # each fold's job, named in the sweep's last line
    assert [row["status"] for row in summary_rows(sweep)] == ["failed"] * 2
