"""Hydra multirun sweeps through the real CLI: grid, failures, a stopped job and `resume=auto`, experiments."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import REPO, script_env, write_tiny_cifar10
from lab import extensions
from sweep_runs import QUICK, assert_ok, run_sweep, summary_rows, sweep_job
from wandb_reader import find_run_files, read_run

pytestmark = pytest.mark.slow


def test_grid_sweep_runs_every_job_in_one_wandb_group_and_ranks_them(tmp_path):
    env = script_env()
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_PROJECT"):
        env.pop(key, None)
    env["NETRC"] = str(tmp_path / "no-netrc")  # offline wandb runs, read back from their files
    sweep = tmp_path / "grid"
    proc = run_sweep(sweep, *QUICK, "optimizer.lr=1e-3,3e-3", "seed=1,2", "logger.log_checkpoints=best", env=env)
    assert_ok(proc)

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

    rows = summary_rows(sweep)
    assert len(rows) == 4 and {row["status"] for row in rows} == {"completed"}
    values = [float(row["val/acc_best"]) for row in rows]
    assert values == sorted(values, reverse=True)  # best first (val/acc_best: maximize)
    for row in rows:  # each row is its own job's result
        summary = sweep_job(sweep, int(row["job"]))
        assert float(row["val/acc_best"]) == summary["val/acc_best"]
        assert int(row["best_epoch"]) == summary["best_epoch"] and row["run_dir"] == str(sweep / row["job"])
    assert f"optimizer.lr=0.001 seed=1 | {sweep}/0" in (sweep / "sweep_summary.md").read_text()
    assert f"best: job #{rows[0]['job']} val/acc_best=" in proc.stdout

    # a job later in the sweep (same process, data reused from the previous job) gets what a run of its own gets
    alone = tmp_path / "alone"
    assert_ok(
        run_sweep(
            tmp_path, *QUICK, "optimizer.lr=3e-3", "seed=2", "logger=none", f"hydra.run.dir={alone}", multirun=False
        )
    )
    for key in ("val/loss", "val/acc", "test/loss"):
        assert sweep_job(sweep, 3)[key] == json.loads((alone / "summary.json").read_text())[key], key


def test_a_failing_job_does_not_stop_the_sweep_and_the_exit_code_says_so(tmp_path):
    sweep = tmp_path / "fail"
    # job 1 raises inside training (after its first validation): plateau watches a metric that does not exist
    proc = run_sweep(sweep, *QUICK, "logger=none", "scheduler=plateau", "scheduler.monitor=val/loss,val/bogus,val/acc")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr  # a user mistake: one line, in the summary and the exit
    assert "error: 1 of 3 sweep jobs failed (#1 UserError: scheduler.monitor='val/bogus'" in proc.stderr

    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert [rows[j]["status"] for j in "012"] == ["completed", "failed", "completed"]
    assert "scheduler.monitor='val/bogus' is not a validation metric" in rows["1"]["error"]
    assert rows["1"]["val/acc_best"] == "" and float(rows["2"]["val/acc_best"]) > 0
    assert sweep_job(sweep, 1)["status"] == "failed" and sweep_job(sweep, 2)["status"] == "completed"
    assert "job #1 failed: UserError" in (sweep / "1" / "train.log").read_text()


def test_fail_fast_stops_launching_after_a_failure(tmp_path):
    sweep = tmp_path / "fast"
    proc = run_sweep(sweep, *QUICK, "logger=none", "sweep.fail_fast=true", "data.batch_size=0,64,32")
    assert proc.returncode == 1 and "data.batch_size must be >= 1" in proc.stderr
    assert not (sweep / "1").exists() and not (sweep / "2").exists()
    (row,) = summary_rows(sweep)
    assert row["status"] == "failed" and row["error"].startswith("ConfigError: data.batch_size")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killing_env(job: int, signal_name: str) -> dict:
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests" / "integration" / "plugins")
    env.update(KILL_JOB=str(job), KILL_SIGNAL=signal_name)
    return env


def test_a_stopped_sweep_job_names_the_command_that_resumes_its_sweep(tmp_path):
    sweep = tmp_path / "stopped"
    command = [
        *QUICK,
        "logger=none",
        "trainer.max_epochs=2",
        "seed=1,2",
        "+callbacks.kill_job={}",
    ]
    proc = run_sweep(sweep, *command, env=_killing_env(0, "TERM"))  # job 0 gets SIGTERM after its first validation
    assert proc.returncode == 143, proc.stderr[-3000:]
    hint = f"(resume the sweep: the same command with hydra.sweep.dir={sweep} resume=auto"
    assert hint in proc.stderr and "ckpt_path=" not in proc.stderr  # not job 0's weights for every job
    assert (sweep / "0" / "checkpoints" / "last.pt").is_file() and not (sweep / "1").exists()
    first_attempt = _files(sweep / "0" / ".hydra")

    assert_ok(run_sweep(sweep, *command, "resume=auto", env=_killing_env(-1, "TERM")))
    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert sorted(rows) == ["0", "1"] and {row["status"] for row in rows.values()} == {"completed"}
    assert f"continuing the run in {sweep}/0" in (sweep / "0" / "train.log").read_text()  # in its own dir
    # the job's own record stays, as a single run's does: this attempt's config is in attempt-2/
    assert {name: files for name, files in _files(sweep / "0" / ".hydra").items() if "/" not in name} == first_attempt
    assert "resume=auto" in (sweep / "0" / ".hydra" / "attempt-2" / "overrides.yaml").read_text()


def test_every_experiment_runs_in_one_sweep(tmp_path):
    # 12 images a batch file: 60 to train (6 of them validate), 12 to test: every stage of debug=fast still runs, and
    # the test split's batches (all of them, under bf16 autocast on the CPU) are 3 instead of 10
    write_tiny_cifar10(tmp_path / "cifar", per_batch=12)
    sweep = tmp_path / "experiments"
    # an extension's experiments (its conf/experiment/) are run by its own tests, on the data they write or prepare
    run_elsewhere = [path.stem for conf in extensions.conf_dirs() for path in conf.glob("experiment/*.yaml")]
    proc = run_sweep(
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
    assert_ok(proc)
    experiments = sorted(p.stem for p in (REPO / "conf/experiment").glob("*.yaml") if p.stem not in run_elsewhere)
    assert {"cifar10_fast", "digits_mlp"} <= set(experiments)
    rows = summary_rows(sweep)
    assert sorted(row["overrides"].split("experiment=")[1].split()[0] for row in rows) == experiments
    assert {row["status"] for row in rows} == {"completed"}
