"""Sweep parts in-process: search-space translation, summary table, pruning callback, study resume, GPU claims,
SLURM requeue overrides, and the multirun-safe CLI error handling."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from hydra_plugins.lab_sweepers._search_space import search_space
from hydra_plugins.lab_sweepers._slurm_launcher import LabSlurmLauncher, with_resume
from hydra_plugins.lab_sweepers._study import Search, _dict_override, absolute_storage
from lab.cli import user_errors
from lab.errors import ConfigError, UserError
from lab.sweeps import devices as sweep_devices
from lab.sweeps.jobs import outcome
from lab.sweeps.pruning import OptunaPruning, TrialPruned
from lab.sweeps.summary import JOB_RECORD, collect, sort_rows, to_csv, to_markdown

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _space(*overrides: str):
    return search_space(OverridesParser.create().parse_overrides(list(overrides)))


# --------------------------------------------------------------------------- search space
def test_hydra_sweep_syntax_becomes_optuna_distributions() -> None:
    params, fixed = _space(
        "optimizer.lr=tag(log, interval(1e-4, 1e-1))",
        "model.dropout=interval(0, 0.5)",
        "trainer.max_epochs=int(interval(2, 8))",
        "data.batch_size=range(16, 80, 16)",
        "model=mlp,cnn",
        "+model.hidden_dims=choice([8],[16, 16])",
        "seed=7",
    )
    assert params["optimizer.lr"].distribution == FloatDistribution(1e-4, 1e-1, log=True)
    assert params["model.dropout"].distribution == FloatDistribution(0.0, 0.5)
    assert params["trainer.max_epochs"].distribution == IntDistribution(2, 8)
    assert params["data.batch_size"].distribution == IntDistribution(16, 64, step=16)  # range: stop excluded
    assert params["model"].distribution == CategoricalDistribution(["mlp", "cnn"])
    assert params["model.hidden_dims"].distribution == CategoricalDistribution(["[8]", "[16,16]"])
    assert fixed == ["seed=7"]
    # sampled values go back as overrides Hydra parses to the same value, with the key's +/++ prefix kept
    assert params["optimizer.lr"].override(0.00123) == "optimizer.lr=0.00123"
    assert params["model.hidden_dims"].override("[16,16]") == "+model.hidden_dims=[16,16]"
    assert params["model"].override("cnn") == "model=cnn"
    parsed = OverridesParser.create().parse_override(params["data.batch_size"].override(48))
    assert parsed.value() == 48


def test_later_overrides_of_a_key_win() -> None:
    params, fixed = _space("optimizer.lr=interval(0.1, 1)", "model=mlp,cnn", "optimizer.lr=0.5", "model=cnn,mlp")
    assert "optimizer.lr" not in params and fixed == ["optimizer.lr=0.5"]
    assert params["model"].distribution == CategoricalDistribution(["cnn", "mlp"])


def test_pruning_callback_override_parses_back_to_its_dict() -> None:
    spec = {"_target_": "a.B", "storage": "sqlite:////tmp/it's here.db", "n": 3, "flag": True, "p": {"x": None}}
    override = OverridesParser.create().parse_override(_dict_override("callbacks.hook", spec))
    assert override.get_key_element() == "+callbacks.hook" and override.value() == spec


def test_relative_sqlite_storage_is_made_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_storage("sqlite:///outputs/train/optuna/s.db") == f"sqlite:///{tmp_path}/outputs/train/optuna/s.db"
    assert (tmp_path / "outputs/train/optuna").is_dir()
    assert absolute_storage("postgresql://host/db") == "postgresql://host/db"


# --------------------------------------------------------------------------- study resume and pruning
def _study(tmp_path: Path, name: str = "s") -> tuple[str, optuna.Study]:
    storage = f"sqlite:///{tmp_path}/study.db"
    return storage, optuna.create_study(study_name=name, storage=storage, direction="maximize")


def test_pruning_callback_reports_each_epoch_and_stops_a_trial_below_the_median(tmp_path) -> None:
    storage, study = _study(tmp_path)
    good = study.ask()
    for epoch, value in enumerate([0.5, 0.8], 1):
        good.report(value, epoch)
    study.tell(good, 0.8)
    study.ask()  # trial 1, running in "another process"

    pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    callback = OptunaPruning(storage, "s", trial_number=1, pruner=pruner, metric="val/acc")
    callback.on_validation_end(None, {"val/acc": 0.6}, 1)  # above the median at epoch 1
    with pytest.raises(TrialPruned, match="trial 1 pruned after epoch 2") as stopped:
        callback.on_validation_end(None, {"val/acc": 0.1}, 2)
    assert stopped.value.run_status == "pruned"
    assert study.trials[1].intermediate_values == {1: 0.6, 2: 0.1}
    with pytest.raises(UserError, match=r"pruning_metric='val/acc' is not a validation metric"):
        callback.on_validation_end(None, {"val/loss": 1.0}, 3)


def _options(storage: str, **extra) -> dict:
    return {
        "storage": storage,
        "study_name": "s",
        "direction": "maximize",
        "sampler": {"_target_": "optuna.samplers.TPESampler", "seed": 1},
        "pruner": None,
        **extra,
    }


def test_resume_marks_interrupted_trials_failed_and_queues_them_again(tmp_path) -> None:
    storage, study = _study(tmp_path)
    done = study.ask({"x": FloatDistribution(0, 1)})
    study.tell(done, 0.5)
    interrupted = study.ask({"x": FloatDistribution(0, 1)})  # a sweep killed mid-trial leaves it RUNNING

    resumed = Search(_options(storage), None, None, None)._open_study()
    trials = resumed.trials
    assert trials[1].state == TrialState.FAIL and trials[1].user_attrs["interrupted"] is True
    assert trials[2].state == TrialState.WAITING and trials[2].user_attrs["retry_of"] == 1
    retry = resumed.ask({"x": FloatDistribution(0, 1)})
    assert retry.number == 2 and retry.params == interrupted.params


def test_a_resumed_study_offsets_the_sampler_seed(tmp_path) -> None:
    storage, study = _study(tmp_path)
    for _ in range(3):
        study.tell(study.ask({"x": FloatDistribution(0, 1)}), 0.0)
    search = Search(_options(storage), None, None, None)
    first = search._open_study().ask({"x": FloatDistribution(0, 1)}).params
    (tmp_path / "fresh").mkdir()
    fresh_storage, _ = _study(tmp_path / "fresh")
    fresh = Search(_options(fresh_storage), None, None, None)._open_study().ask({"x": FloatDistribution(0, 1)}).params
    assert first != fresh  # seed 1 + 3 trials, not seed 1 again (which would replay trial 0's point)


# --------------------------------------------------------------------------- job outcomes and the summary
def _job_return(status: JobStatus, value) -> JobReturn:
    ret = JobReturn(status=status)
    ret.return_value = value
    return ret


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


# --------------------------------------------------------------------------- GPUs per joblib worker
def test_each_worker_claims_a_free_gpu_then_shares(tmp_path) -> None:
    first = sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=0)
    second = sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=0)
    third = sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=3)
    assert (first[0], second[0]) == ("4", "6") and third == ("6", None)  # all taken: job_num % n_gpus
    first[1].close()  # a worker that exits frees its GPU
    assert sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=1)[0] == "4"


def _job_config(tmp_path: Path, launcher: str, num: int = 0):
    hydra = {"mode": RunMode.MULTIRUN, "launcher": {"_target_": launcher}, "sweep": {"dir": str(tmp_path)}}
    return OmegaConf.create({"hydra": {**hydra, "job": {"num": num}}})


def test_joblib_worker_pins_its_gpu_for_all_its_jobs(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sweep_devices, "_claimed", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    callback = sweep_devices.GpuPerWorker()
    joblib = _job_config(tmp_path, "hydra_plugins.lab_sweepers.joblib_launcher.LabJoblibLauncher", num=5)
    callback.on_job_start(joblib)
    assert sweep_devices._claimed[0] == "2" and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    callback.on_job_start(joblib)  # the worker's next job keeps its GPU (CUDA cannot switch in a live process)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"

    monkeypatch.setattr(sweep_devices, "_claimed", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    callback.on_job_start(_job_config(tmp_path, "hydra._internal.core_plugins.basic_launcher.BasicLauncher"))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # sequential jobs: nothing to spread


# --------------------------------------------------------------------------- SLURM requeue
def test_a_requeued_slurm_job_resumes_from_its_last_checkpoint(tmp_path) -> None:
    assert with_resume(["seed=1"], tmp_path) == ["seed=1"]  # nothing saved yet: start over
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints/last.pt").write_bytes(b"")
    assert with_resume(["seed=1", "ckpt_path=old.pt"], tmp_path) == [
        "seed=1",
        f"ckpt_path={tmp_path}/checkpoints/last.pt",
    ]

    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path)}}})
    try:
        delayed = LabSlurmLauncher().checkpoint(["seed=1"], "hydra.sweep.dir", 0, "id", {})
    finally:
        HydraConfig.instance().cfg = None
    assert delayed.args[0] == ["seed=1", f"ckpt_path={tmp_path}/checkpoints/last.pt"] and delayed.args[2] == 0


# --------------------------------------------------------------------------- CLI errors inside a sweep
@pytest.mark.parametrize(("mode", "raised"), [("RUN", SystemExit), ("MULTIRUN", ConfigError)])
def test_user_errors_exit_in_a_run_but_fail_only_the_job_in_a_sweep(mode, raised) -> None:
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {"mode": RunMode[mode]}})
    try:
        with pytest.raises(raised), user_errors():
            raise ConfigError("optimizer.lr must be > 0")
    finally:
        HydraConfig.instance().cfg = None
