"""The extension's parts in-process: search-space translation, the pruning callback and its option, study resume,
GPU claims, SLURM requeue overrides, and its plugins as Hydra finds them (or refuses them, their package missing)."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from lab import extras
from lab.config import callbacks as callback_options
from lab.errors import ConfigError, UserError
from lab.extensions.sweeps import devices as sweep_devices
from lab.extensions.sweeps.plugins import LabSlurmLauncher, MissingPlugin, with_resume
from lab.extensions.sweeps.pruning import OptunaPruning, TrialPruned
from lab.extensions.sweeps.search_space import search_space
from lab.extensions.sweeps.study import Search, _dict_override, absolute_storage

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


# --------------------------------------------------------------------------- GPUs per joblib worker
def test_each_worker_claims_a_free_gpu_then_shares(tmp_path) -> None:
    first = sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=0)
    second = sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=0)
    third = sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=3)
    assert (first[0], second[0]) == ("4", "6") and third == ("6", None)  # all taken: job_num % n_gpus
    first[1].close()  # a worker that exits frees its GPU
    assert sweep_devices.claim_gpu(["4", "6"], tmp_path, fallback=1)[0] == "4"


def _job_hydra(tmp_path: Path, num: int):
    return OmegaConf.create({"sweep": {"dir": str(tmp_path)}, "job": {"num": num}})


def test_joblib_worker_pins_its_gpu_for_all_its_jobs(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(sweep_devices, "_claimed", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    ran = []
    task = sweep_devices.on_a_gpu_of_its_own(lambda cfg: ran.append(os.environ["CUDA_VISIBLE_DEVICES"]))
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": _job_hydra(tmp_path, num=5)})
    try:
        task(None)
        assert sweep_devices._claimed[0] == "2" and ran == ["2"]  # claimed before the job's own code runs
        HydraConfig.instance().cfg = OmegaConf.create({"hydra": _job_hydra(tmp_path, num=6)})
        task(None)  # the worker's next job keeps its GPU (CUDA cannot switch in a live process)
    finally:
        HydraConfig.instance().cfg = None
    assert ran == ["2", "2"] and os.environ["CUDA_VISIBLE_DEVICES"] == "2"


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


# --------------------------------------------------------------------------- the plugins as Hydra finds them
def test_every_stored_config_targets_a_plugin_hydra_found(compose) -> None:
    """Hydra instantiates only the classes its plugin scan registered, under the names it found them by."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    compose()  # as Hydra starts: its search path plugins run (JoblibIsLabJoblib stores `joblib` then)
    found = Plugins.instance().class_name_to_class
    for path in ("sweeper/lab_optuna", "launcher/slurm", "launcher/lab_slurm", "launcher/joblib"):
        target = ConfigStore.instance().load(f"hydra/{path}.yaml").node._target_
        assert target.startswith("hydra_plugins.lab_sweepers.extensions.") and target in found, (path, target)


def test_a_launcher_whose_plugin_is_missing_refuses_naming_the_extra(monkeypatch) -> None:
    real = extras.installed
    monkeypatch.setattr(extras, "installed", lambda dist: dist != "hydra-submitit-launcher" and real(dist))
    with pytest.raises(ConfigError, match=r"hydra/launcher=slurm needs hydra-submitit-launcher.*EXTRAS=\S*slurm"):
        MissingPlugin(what="hydra/launcher=slurm", requires=["hydra-submitit-launcher"])


def test_the_pruning_callback_is_an_option_chosen_by_name_and_its_keys_checked(compose) -> None:
    cfg = compose(["callback=optuna_pruning", "callbacks.optuna_pruning.storage=sqlite:///s.db"])
    assert cfg.callbacks.optuna_pruning.metric == "val/acc"  # the option's defaults, in its own node
    spec = {"storage": "sqlite:///s.db", "study_name": "s", "trial_number": 2}
    (option,) = callback_options.chosen({"optuna_pruning": spec}).values()
    assert type(option).__name__ == "OptunaPruningConfig" and option.trial_number == 2
    with pytest.raises(ConfigError, match=r"callback=optuna_prunin is not an option of callback; did you mean"):
        callback_options.chosen({"optuna_prunin": spec})
    with pytest.raises(ConfigError, match=r"Key 'bogus' not in 'OptunaPruningConfig'"):
        callback_options.chosen({"optuna_pruning": {**spec, "bogus": 1}})
