"""Hydra multirun sweeps through the real CLI: grid, failures, Optuna (resume, pruning), launchers, experiments."""

from __future__ import annotations

import csv
import json
import os
import pickle
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from helpers import REPO, readme_commands, script_env
from lab import extensions
from lab.sweeps.study_storage import open_storage
from wandb_reader import find_run_files, read_run
from warm_python import run_python

pytestmark = pytest.mark.slow

QUICK = ["debug=fast", "model=mlp"]


def _sweep(sweep_dir: Path, *overrides: str, env: dict | None = None, multirun: bool = True):
    args = [str(REPO / "scripts/train.py"), *(["-m"] if multirun else []), f"hydra.sweep.dir={sweep_dir}", *overrides]
    return run_python(args, cwd=REPO, env=env or script_env(), timeout=300)


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _summary_rows(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "sweep_summary.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _job(sweep_dir: Path, num: int, name: str = "summary.json") -> dict:
    return json.loads((sweep_dir / str(num) / name).read_text())


def test_grid_sweep_runs_every_job_in_one_wandb_group_and_ranks_them(tmp_path):
    env = script_env()
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_PROJECT"):
        env.pop(key, None)
    env["NETRC"] = str(tmp_path / "no-netrc")  # offline wandb runs, read back from their files
    sweep = tmp_path / "grid"
    proc = _sweep(sweep, *QUICK, "optimizer.lr=1e-3,3e-3", "seed=1,2", "logger.log_checkpoints=best", env=env)
    _ok(proc)

    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]
    runs = [read_run(find_run_files(sweep / str(job) / "wandb")[0]) for job in range(4)]
    assert len({run.run_id for run in runs}) == 4 and {run.group for run in runs} == {"train-grid"}
    assert runs[0].name.startswith("0:debug=fast,") and all(run.exit_code == 0 for run in runs)
    assert [run.artifacts for run in runs] == [[f"model-{run.run_id}"] for run in runs]  # best.pt as a model artifact
    assert [(r.config["optimizer"]["lr"], r.config["seed"]) for r in runs] == [
        (0.001, 1),
        (0.001, 2),
        (0.003, 1),
        (0.003, 2),
    ]

    rows = _summary_rows(sweep)
    assert len(rows) == 4 and {row["status"] for row in rows} == {"completed"}
    values = [float(row["val/acc_best"]) for row in rows]
    assert values == sorted(values, reverse=True)  # best first (val/acc_best: maximize)
    for row in rows:  # each row is its own job's result
        summary = _job(sweep, int(row["job"]))
        assert float(row["val/acc_best"]) == summary["val/acc_best"]
        assert int(row["best_epoch"]) == summary["best_epoch"] and row["run_dir"] == str(sweep / row["job"])
    assert f"optimizer.lr=0.001 seed=1 | {sweep}/0" in (sweep / "sweep_summary.md").read_text()
    assert f"best: job #{rows[0]['job']} val/acc_best=" in proc.stdout

    # a job later in the sweep (same process, data reused from the previous job) gets what a run of its own gets
    alone = tmp_path / "alone"
    _ok(
        _sweep(tmp_path, *QUICK, "optimizer.lr=3e-3", "seed=2", "logger=none", f"hydra.run.dir={alone}", multirun=False)
    )
    for key in ("val/loss", "val/acc", "test/loss"):
        assert _job(sweep, 3)[key] == json.loads((alone / "summary.json").read_text())[key], key


def test_a_failing_job_does_not_stop_the_sweep_and_the_exit_code_says_so(tmp_path):
    sweep = tmp_path / "fail"
    # job 1 raises inside training (after its first validation): plateau watches a metric that does not exist
    proc = _sweep(sweep, *QUICK, "logger=none", "scheduler=plateau", "scheduler.monitor=val/loss,val/bogus,val/acc")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr  # a user mistake: one line, in the summary and the exit
    assert "error: 1 of 3 sweep jobs failed (#1 UserError: scheduler.monitor='val/bogus'" in proc.stderr

    rows = {row["job"]: row for row in _summary_rows(sweep)}
    assert [rows[j]["status"] for j in "012"] == ["completed", "failed", "completed"]
    assert "scheduler.monitor='val/bogus' is not a validation metric" in rows["1"]["error"]
    assert rows["1"]["val/acc_best"] == "" and float(rows["2"]["val/acc_best"]) > 0
    assert _job(sweep, 1)["status"] == "failed" and _job(sweep, 2)["status"] == "completed"
    assert "job #1 failed: UserError" in (sweep / "1" / "train.log").read_text()


def test_fail_fast_stops_launching_after_a_failure(tmp_path):
    sweep = tmp_path / "fast"
    proc = _sweep(sweep, *QUICK, "logger=none", "sweep.fail_fast=true", "data.batch_size=0,64,32")
    assert proc.returncode == 1 and "data.batch_size must be >= 1" in proc.stderr
    assert not (sweep / "1").exists() and not (sweep / "2").exists()
    (row,) = _summary_rows(sweep)
    assert row["status"] == "failed" and row["error"].startswith("ConfigError: data.batch_size")


def test_optuna_study_resumes_to_n_trials_and_prunes_bad_trials(tmp_path):
    storage = f"sqlite:///{tmp_path}/study.db"
    search = [
        "hparams_search=optuna",  # sets hydra.mode=MULTIRUN: no -m
        *QUICK,
        "logger=none",
        "trainer.max_epochs=3",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=resume-test",
        "hydra.sweeper.sampler.seed=10",  # draws 0.03, 1e-8, 0.03, 1e-8: a good trial completes first
        "hydra.sweeper.pruner.n_startup_trials=1",
        "hydra.sweeper.pruner.n_warmup_steps=0",
        # the command line replaces the example space: one clearly useless learning rate, the rest fixed
        "optimizer.lr=choice(0.03,1e-8)",
        "optimizer.weight_decay=0.0",
        "data.batch_size=64",
    ]
    first = _sweep(tmp_path / "first", *search, "hydra.sweeper.n_trials=4", multirun=False)
    _ok(first)
    study = optuna.load_study(study_name="resume-test", storage=storage)
    before = [(t.number, t.state, t.params) for t in study.trials]
    assert len(before) == 4

    second = _sweep(tmp_path / "second", *search, "hydra.sweeper.n_trials=6", multirun=False)
    _ok(second)
    trials = optuna.load_study(study_name="resume-test", storage=storage).trials
    assert [(t.number, t.state, t.params) for t in trials[:4]] == before  # the same study, continued
    assert [t.number for t in trials] == list(range(6))
    assert sorted(p.name for p in (tmp_path / "second").iterdir() if p.is_dir()) == ["4", "5"]  # job = trial number

    states = {t.state for t in trials}
    assert TrialState.COMPLETE in states and TrialState.PRUNED in states
    for trial in trials:
        assert trial.user_attrs["run_dir"].endswith(f"/{trial.number}")
        if trial.state == TrialState.PRUNED:  # only the useless learning rate falls below the median
            assert trial.params["optimizer.lr"] == 1e-8
            run_dir = Path(trial.user_attrs["run_dir"])
            assert json.loads((run_dir / "summary.json").read_text())["status"] == "pruned"
        if trial.state == TrialState.COMPLETE:
            assert (
                trial.value
                == json.loads((Path(trial.user_attrs["run_dir"]) / "summary.json").read_text())["val/acc_best"]
            )
    rows = _summary_rows(tmp_path / "second")
    assert {row["job"] for row in rows} == {"4", "5"}


def test_joblib_runs_jobs_in_parallel_processes(tmp_path):
    sweep = tmp_path / "joblib"
    # the README's command as written (test_readme leaves it to this test), shortened as test_readme does
    (command,) = [c for c in readme_commands() if "hydra/launcher=joblib" in c]
    python, script, multirun, *args = shlex.split(command)
    assert (python, script, multirun) == ("python", "scripts/train.py", "-m") and "seed=1,2" in args, command
    # with DataLoader workers: a loky process passes on its own start method, which once failed to start them
    _ok(_sweep(sweep, *args, *QUICK, "logger=none", "data.num_workers=1"))
    jobs = [_job(sweep, n, "sweep_job.json") for n in (0, 1)]
    assert jobs[0]["pid"] != jobs[1]["pid"]
    assert jobs[0]["start"] < jobs[1]["end"] and jobs[1]["start"] < jobs[0]["end"]  # they overlapped
    assert [row["status"] for row in _summary_rows(sweep)] == ["completed"] * 2


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killing_env(job: int, signal_name: str) -> dict:
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests" / "integration" / "plugins")
    env.update(KILL_JOB=str(job), KILL_SIGNAL=signal_name)
    return env


def test_a_killed_joblib_worker_fails_its_own_job_and_resume_auto_runs_only_that_one(tmp_path):
    sweep = tmp_path / "joblib"
    command = [*QUICK, "logger=none", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2,3"]
    command.append("+callbacks.kill={_target_:kill_job.KillJob}")  # job 1 SIGKILLs itself, as an OOM kill does
    proc = _sweep(sweep, *command, env=_killing_env(1, "KILL"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: 1 of 3 sweep jobs failed (#1 JobKilled: worker process killed by SIGKILL (out of memory?)); "
        f"overrides and logs: {sweep}/sweep_summary.md"
    )
    rows = {row["job"]: row for row in _summary_rows(sweep)}
    assert [rows[j]["status"] for j in "012"] == ["completed", "failed", "completed"]  # the others went on
    assert rows["1"]["error"] == "JobKilled: worker process killed by SIGKILL (out of memory?)"
    finished = {job: _files(sweep / job) for job in "02"}

    # the same command again would write over the finished jobs: refused in one line, nothing written
    before = _files(sweep)
    again = _sweep(sweep, *command, env=_killing_env(-1, "KILL"))
    assert again.returncode == 1 and again.stderr.strip() == (
        f"error: {sweep} holds an earlier sweep (3 job dirs); a sweep never writes over another: leave "
        "hydra.sweep.dir unset (every sweep gets its own), pick another dir, or add resume=auto to continue that "
        "sweep (the same command: its completed jobs are kept)"
    )
    assert _files(sweep) == before

    # resume=auto runs the failed job again in its own dir; the completed ones are kept as they are
    resumed = _sweep(sweep, *command, "resume=auto", env=_killing_env(-1, "KILL"))
    _ok(resumed)
    assert {job: _files(sweep / job) for job in "02"} == finished
    rows = {row["job"]: row for row in _summary_rows(sweep)}
    assert sorted(rows) == ["0", "1", "2"] and {row["status"] for row in rows.values()} == {"completed"}
    assert rows["1"]["run_dir"] == str(sweep / "1") and "seed=2" in rows["1"]["overrides"]
    assert _job(sweep, 1)["status"] == "completed" and not (sweep / ".lock").exists()


def test_a_stopped_sweep_job_names_the_command_that_resumes_its_sweep(tmp_path):
    sweep = tmp_path / "stopped"
    command = [
        *QUICK,
        "logger=none",
        "trainer.max_epochs=2",
        "seed=1,2",
        "+callbacks.kill={_target_:kill_job.KillJob}",
    ]
    proc = _sweep(sweep, *command, env=_killing_env(0, "TERM"))  # job 0 gets SIGTERM after its first validation
    assert proc.returncode == 143, proc.stderr[-3000:]
    hint = f"(resume the sweep: the same command with hydra.sweep.dir={sweep} resume=auto"
    assert hint in proc.stderr and "ckpt_path=" not in proc.stderr  # not job 0's weights for every job
    assert (sweep / "0" / "checkpoints" / "last.pt").is_file() and not (sweep / "1").exists()
    first_attempt = _files(sweep / "0" / ".hydra")

    _ok(_sweep(sweep, *command, "resume=auto", env=_killing_env(-1, "TERM")))
    rows = {row["job"]: row for row in _summary_rows(sweep)}
    assert sorted(rows) == ["0", "1"] and {row["status"] for row in rows.values()} == {"completed"}
    assert f"continuing the run in {sweep}/0" in (sweep / "0" / "train.log").read_text()  # in its own dir
    # the job's own record stays, as a single run's does: this attempt's config is in attempt-2/
    assert {name: files for name, files in _files(sweep / "0" / ".hydra").items() if "/" not in name} == first_attempt
    assert "resume=auto" in (sweep / "0" / ".hydra" / "attempt-2" / "overrides.yaml").read_text()


def _write_tiny_cifar10(root: Path, per_batch: int) -> None:
    """CIFAR-10's python format (pickled dicts of uint8 rows, 3x32x32 each), small: no download here."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"labels": [i % 10 for i in range(per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    names = [f"class{i}".encode() for i in range(10)]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))


def test_every_experiment_runs_in_one_sweep(tmp_path):
    # 12 images a batch file: 60 to train (6 of them validate), 12 to test: every stage of debug=fast still runs, and
    # the test split's batches (all of them, under bf16 autocast on the CPU) are 3 instead of 10
    _write_tiny_cifar10(tmp_path / "cifar", per_batch=12)
    sweep = tmp_path / "experiments"
    # finetune_folder needs an image folder and pretrained weights: test_finetune writes both and runs it; an
    # extension's experiments (its conf/experiment/) are run by its own tests, on the data they write or prepare
    extensions_experiments = [path.stem for conf in extensions.conf_dirs() for path in conf.glob("experiment/*.yaml")]
    run_elsewhere = ["finetune_folder", *extensions_experiments]
    proc = _sweep(
        sweep,
        f"experiment=glob(*,exclude=[{','.join(run_elsewhere)}])",
        "debug=fast",
        "logger=none",
        f"data.root={tmp_path / 'cifar'}",  # digits ignores it
        # the CIFAR-10 experiments train under bf16 autocast, slow on a CPU (a ResNet-18 step of 32 images: ~25 s of
        # CPU): the experiments as written, on small batches
        "data.batch_size=4",
        "data.num_workers=0",
    )
    _ok(proc)
    experiments = sorted(p.stem for p in (REPO / "conf/experiment").glob("*.yaml") if p.stem not in run_elsewhere)
    assert {"cifar10_fast", "cifar10_resnet18", "digits_mlp"} <= set(experiments)
    rows = _summary_rows(sweep)
    assert sorted(row["overrides"].split("experiment=")[1].split()[0] for row in rows) == experiments
    assert {row["status"] for row in rows} == {"completed"}


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_two_optuna_drivers_share_a_study_and_a_killed_drivers_trial_is_run_again(tmp_path, kind):
    """Two driver processes on one study: a sqlite file, or a journal file (the file-system backend for nodes that
    share a file system, whose heartbeat is the sweeper's own trial attribute)."""
    storage = f"sqlite:///{tmp_path}/study.db" if kind == "sqlite" else f"journal:///{tmp_path}/study.log"
    search = [
        "hparams_search=optuna",
        *QUICK,
        "logger=none",
        "trainer.max_epochs=1",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=drivers",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.pruner=null",
        "hydra.sweeper.heartbeat_interval=1",
        "hydra.sweeper.grace_period=3",  # a dead driver's trial is retried 3 s after its last heartbeat
        "optimizer.lr=tag(log,interval(1e-3,1e-1))",
    ]
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests" / "integration" / "plugins")

    def start(name: str, seed: int, *extra: str, **more_env: str) -> subprocess.Popen:
        args = [f"hydra.sweep.dir={tmp_path / name}", f"hydra.sweeper.sampler.seed={seed}", *search, *extra]
        command = [sys.executable, str(REPO / "scripts/train.py"), *args]
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (a file, not a pipe: neither driver blocks on it)
        return subprocess.Popen(command, cwd=REPO, env={**env, **more_env}, stdout=log, stderr=subprocess.STDOUT)

    # driver a completes one trial, then dies (SIGKILL) in its second, which it leaves RUNNING; b runs the rest.
    # b starts once a runs its first trial, so that a surely gets two (the creation race is test_optuna_drivers')
    a = start("a", 1, "+callbacks.kill={_target_:kill_driver.KillDriver}", KILL_AFTER_TRIALS="1")
    while not (tmp_path / "a" / "0").is_dir() and a.poll() is None:
        time.sleep(0.1)
    b = start("b", 2)
    assert a.wait(timeout=300) == -9, (tmp_path / "a.log").read_text()[-3000:]
    assert b.wait(timeout=300) == 0, (tmp_path / "b.log").read_text()[-3000:]

    trials = optuna.load_study(study_name="drivers", storage=open_storage(storage)).trials
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    (killed,) = [t for t in trials if t.state == TrialState.FAIL]
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(done) == 4 and len(trials) == 5  # n_trials in all: none lost, none doubled, none beyond
    assert retry in done and retry.params == killed.params
    assert (tmp_path / "a" / str(killed.number)).is_dir()
    run_dirs = [Path(t.user_attrs["run_dir"]) for t in done]
    assert [d.name for d in run_dirs] == [str(t.number) for t in done]  # job = trial number, in its driver's dir
    assert sorted(d.parent.name for d in run_dirs) == ["a", "b", "b", "b"]  # both drivers ran the study's trials
    assert f"trial {killed.number}: its driver stopped" in (tmp_path / "b.log").read_text()
