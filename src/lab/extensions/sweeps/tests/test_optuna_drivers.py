"""Many Optuna drivers on one study, in-process: two Search loops in threads with a fake launcher, heartbeats and the
retry of a dead driver's trial, the cap on n_trials, and the storage URLs (sqlite and journal)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import optuna
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf
from optuna.trial import TrialState

from lab.extensions.sweeps import study as _study
from lab.extensions.sweeps.search_space import search_space
from lab.extensions.sweeps.study import Search
from lab.extensions.sweeps.study_storage import absolute_storage, open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = ["x=interval(0, 1)"]


class FakeLauncher:
    """Runs a job by sleeping a little and returning its x; records which trial numbers it ran."""

    def __init__(self, ran: list[int], lock: threading.Lock) -> None:
        self.ran, self.lock = ran, lock

    def launch(self, job_overrides, initial_job_idx):
        returns = []
        for num, overrides in enumerate(job_overrides, initial_job_idx):
            time.sleep(0.05)  # long enough for the other driver to ask meanwhile
            with self.lock:
                self.ran.append(num)
            ret = JobReturn(status=JobStatus.COMPLETED)
            ret.return_value = float(next(o for o in overrides if o.startswith("x=")).split("=")[1])
            returns.append(ret)
        return returns


def _options(storage: str, **extra) -> dict:
    return {
        "storage": storage,
        "study_name": "s",
        "direction": "maximize",
        "sampler": {"_target_": "optuna.samplers.RandomSampler", "seed": extra.pop("seed", 1)},
        "pruner": None,
        "n_jobs": 1,
        "heartbeat_interval": 1,
        "grace_period": 2,
        "max_retry": 3,
        **extra,
    }


def _driver(storage: str, ran: list[int], lock: threading.Lock, **options) -> None:
    search = Search(_options(storage, **options), OmegaConf.create({}), FakeLauncher(ran, lock), None)
    params, fixed = search_space(OverridesParser.create().parse_overrides(SPACE))
    search._search(params, fixed, {name: p.distribution for name, p in params.items()})


@pytest.fixture(params=["sqlite", "journal"])
def storage(request, tmp_path) -> str:
    return absolute_storage(
        f"sqlite:///{tmp_path}/s.db" if request.param == "sqlite" else f"journal:///{tmp_path}/s.log"
    )


def _trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="s", storage=open_storage(storage)).trials


def test_two_drivers_on_one_study_run_n_trials_together_none_lost_or_doubled(storage) -> None:
    ran: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def driver(seed: int) -> None:
        try:
            _driver(storage, ran, lock, n_trials=8, seed=seed)
        except BaseException as err:  # reported below, in the test's own thread
            errors.append(err)

    drivers = [threading.Thread(target=driver, args=(seed,)) for seed in (1, 2)]  # both create the new study
    for thread in drivers:
        thread.start()
    for thread in drivers:
        thread.join()
    assert errors == []
    trials = _trials(storage)
    assert [t.number for t in trials] == list(range(8))  # none beyond n_trials: no surplus trial was even asked
    assert {t.state for t in trials} == {TrialState.COMPLETE}
    assert sorted(ran) == list(range(8))  # each trial's job ran once
    assert all(t.value == t.params["x"] for t in trials)


def _stale_trial(storage: str) -> optuna.trial.Trial:
    """A trial whose driver died: RUNNING, heartbeat recorded once, then none."""
    search = Search(_options(storage), OmegaConf.create({}), None, None)
    study = search._open_study()
    with pytest.warns(UserWarning, match="Heartbeat of storage") if "sqlite" in storage else contextlib.nullcontext():
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})  # as Search._ask does, in a driver
    search.heartbeat.beat([trial])
    return trial


def test_a_dead_drivers_trial_is_failed_and_run_again_by_a_live_driver(storage) -> None:
    dead = _stale_trial(storage)
    ran: list[int] = []
    _driver(storage, ran, threading.Lock(), n_trials=3)  # waits the grace period out, then retries trial 0
    trials = _trials(storage)
    assert trials[0].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1 and retries[0].params == dead.params and retries[0].state == TrialState.COMPLETE
    assert sorted(t.number for t in trials if t.state == TrialState.COMPLETE) == ran and len(ran) == 3
    assert 0 not in ran  # the dead driver's trial was not run under its own number again


def test_a_new_driver_leaves_a_live_drivers_trials_running(storage) -> None:
    live = _stale_trial(storage)
    dead = _stale_trial(storage)
    search = Search(_options(storage), OmegaConf.create({}), None, None)
    time.sleep(2)  # sqlite's clock has whole seconds: beats 3.5 s apart against a grace period of 2 s
    search.heartbeat.beat([live])  # the live driver beats on; the dead one does not
    time.sleep(1.5)
    study = search._open_study()
    assert [t.state for t in study.trials] == [TrialState.RUNNING, TrialState.RUNNING]  # nothing failed at start
    search.heartbeat.reap(study)
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.RUNNING, TrialState.FAIL, TrialState.WAITING]
    assert study.trials[2].params == dead.params


def test_without_a_database_lock_a_trial_beyond_n_trials_is_given_back_unrun(tmp_path, monkeypatch) -> None:
    # a database server has no file to lock: simulate another driver asking between this driver's count and ask
    monkeypatch.setattr(_study, "study_lock", lambda url: contextlib.nullcontext())
    storage = absolute_storage(f"sqlite:///{tmp_path}/s.db")
    search = Search(_options(storage), OmegaConf.create({}), None, None)
    study = search._open_study()
    other = Search(_options(storage), OmegaConf.create({}), None, None)._open_study()
    distributions = {"x": optuna.distributions.FloatDistribution(0, 1)}
    ask = study.ask

    def racing_ask(*args, **kwargs):
        other.ask(distributions)  # the other driver takes the last place first
        return ask(*args, **kwargs)

    monkeypatch.setattr(study, "ask", racing_ask)
    assert search._ask(study, distributions, wanted=1, batch=1) == []
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.RUNNING, TrialState.FAIL]
    assert trials[1].user_attrs == {"surplus": True}
    assert len(_study._occupied(trials)) == 1


@pytest.mark.parametrize("url", ["outputs/s.db", "journal:///", "journal:/x.log", "sqlite//x.db", "study.log"], ids=str)
def test_a_storage_that_names_no_study_storage_is_refused_in_one_line(tmp_path, monkeypatch, url) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as refused:
        Search(_options(url), OmegaConf.create({}), None, None)
    message = str(refused.value.code)
    assert message.startswith(f"error: hydra.sweeper.storage={url!r} is not a study storage") and "\n" not in message
    assert list(Path(tmp_path).iterdir()) == []  # nothing written


@pytest.mark.parametrize(("key", "value"), [("heartbeat_interval", 0), ("grace_period", -1), ("max_retry", -1)])
def test_a_bad_heartbeat_setting_is_refused_in_one_line(tmp_path, key, value) -> None:
    with pytest.raises(SystemExit) as refused:
        Search(_options(f"sqlite:///{tmp_path}/s.db", **{key: value}), OmegaConf.create({}), None, None)
    assert str(refused.value.code).startswith(f"error: hydra.sweeper.{key}={value}: a whole number")
    assert list(tmp_path.iterdir()) == []


def test_journal_storage_paths_are_made_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_storage("journal:///optuna/s.log") == f"journal:///{tmp_path}/optuna/s.log"
    assert (tmp_path / "optuna").is_dir()
