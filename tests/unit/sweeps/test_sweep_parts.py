"""Sweep parts in-process: job outcomes, the summary table, and the multirun-safe CLI error handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

from lab.cli import user_errors
from lab.errors import ConfigError, UserError
from lab.sweeps.jobs import Outcome, combine, outcome
from lab.sweeps.summary import JOB_RECORD, Row, by_parameter_set, collect, sets_to_csv, sort_rows, to_csv, to_markdown


# --------------------------------------------------------------------------- job outcomes and the summary
def _job_return(status: JobStatus, value) -> JobReturn:
    ret = JobReturn(status=status)
    ret.return_value = value
    return ret


class TrialPruned(Exception):
    """What a sweeper's pruning callback raises in a job: its `run_status` is the job's status."""

    run_status = "pruned"


def test_outcome_reads_status_value_and_error_without_raising() -> None:
    assert outcome(_job_return(JobStatus.COMPLETED, 0.75)).value == 0.75
    assert outcome(_job_return(JobStatus.COMPLETED, float("nan"))).value is None
    failed = outcome(_job_return(JobStatus.FAILED, UserError("bad root\nmore")))
    assert (failed.status, failed.error, failed.failed) == ("failed", "UserError: bad root", True)
    pruned = outcome(_job_return(JobStatus.FAILED, TrialPruned("trial 3 pruned")))
    assert (pruned.status, pruned.failed) == ("pruned", False)


def _record(root: Path, job: int, status: str, value, metrics: list | None = None, best_epoch=None) -> None:
    run = root / str(job)
    run.mkdir(parents=True)
    record = {"job": job, "status": status, "value": value, "error": None if status == "completed" else "X: y"}
    record.update(wall_s=1.5, overrides=[f"seed={job}", "model=mlp"])
    (run / JOB_RECORD).write_text(json.dumps(record))
    if best_epoch is not None:
        (run / "summary.json").write_text(json.dumps({"best_epoch": best_epoch}))
    if metrics:
        (run / "metrics.jsonl").write_text("".join(json.dumps({"val/acc_best": v}) + "\n" for v in metrics))


def test_summary_rows_sorted_by_metric_then_pruned_then_failed(tmp_path) -> None:
    _record(tmp_path, 0, "completed", 0.5, best_epoch=2)
    _record(tmp_path, 1, "failed", None)
    _record(tmp_path, 2, "pruned", None, metrics=[0.1, 0.3])  # the value it had reached when pruned
    _record(tmp_path, 3, "completed", 0.9, best_epoch=4)
    rows = sort_rows(collect(tmp_path, "val/acc_best"), "maximize")
    assert [(r.job, r.status, r.value) for r in rows] == [
        (3, "completed", 0.9),
        (0, "completed", 0.5),
        (2, "pruned", 0.3),
        (1, "failed", None),
    ]
    assert [r.job for r in sort_rows(rows, "minimize")][:2] == [0, 3]
    assert to_csv(rows, "val/acc_best").splitlines()[1] == f"1,3,completed,0.9,4,1.5,seed=3 model=mlp,{tmp_path}/3,"
    table = to_markdown(rows, "val/acc_best")
    assert "| 1 | 3 | completed | 0.9000 | 4 | 1.5 | seed=3 |" in table  # varying overrides only
    assert "Common to every job: `model=mlp`" in table


def test_a_parameter_set_run_as_parts_is_their_mean_and_fails_with_one() -> None:
    """A sweep seam (TrainNodeConfig.sweep_parts) may run each parameter set as several jobs, `part=0..n-1`."""

    def row(job: int, lr: str, part: int, status: str = "completed", value: float | None = None) -> Row:
        metrics = {"val/acc_best": value, "val/loss": 1 - value, "test/acc": 0.0} if value is not None else {}
        overrides = [f"optimizer.lr={lr}", f"part={part}"]
        return Row(job, status, value, 1, 1.0, overrides, f"/s/{job}", None, metrics)

    rows = [row(0, "1e-3", 0, value=0.5), row(1, "1e-3", 1, value=0.7), row(2, "3e-3", 0, value=0.9)]
    rows.append(row(3, "3e-3", 1, status="failed"))
    sets = by_parameter_set(rows, "part", "maximize")
    assert [(s.overrides, [r.job for r in s.jobs], s.status) for s in sets] == [
        (["optimizer.lr=1e-3"], [0, 1], "completed"),
        (["optimizer.lr=3e-3"], [2, 3], "failed"),  # a failed part: no mean, ranked last
    ]
    assert sets[0].value == pytest.approx(0.6) and sets[1].value is None
    mean, std = sets[0].stats["val/loss"]
    assert (mean, std) == (pytest.approx(0.4), pytest.approx(0.1)) and "test/acc" not in sets[0].stats
    assert sets_to_csv(sets, "val/acc_best").splitlines()[0] == (
        "rank,jobs,status,val/acc_best,val/acc_best_mean,val/acc_best_std,val/loss_mean,val/loss_std,overrides"
    )
    assert combine([Outcome("completed", 0.5, None), Outcome("pruned", None, "TrialPruned: x")]).status == "pruned"


# --------------------------------------------------------------------------- CLI errors inside a sweep
@pytest.mark.parametrize(("mode", "raised"), [("RUN", SystemExit), ("MULTIRUN", ConfigError)])
def test_user_errors_exit_in_a_run_but_fail_only_the_job_in_a_sweep(mode, raised) -> None:
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {"mode": RunMode[mode]}})
    try:
        with pytest.raises(raised), user_errors():
            raise ConfigError("optimizer.lr must be > 0")
    finally:
        HydraConfig.instance().cfg = None
