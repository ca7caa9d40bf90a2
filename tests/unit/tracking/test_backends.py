"""Each tracker behind the Tracker interface, read back with its own library: wandb's offline run file
(tests/wandb_reader.py), the csv module. Also: choosing trackers with the logger group, continuing a run
(continuing, resume_id) or replacing it with a new one, a tracker that fails to start, a folder that cannot be
written, Ctrl-C, and a fork's tracker added with one TrackerConfig."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import lab.config
from helpers import forget_option
from lab.config import validate
from lab.config.trackers import TrackerConfig, logger_schema, trackers
from lab.errors import ConfigError, UserError
from lab.tracking import Tracker, backends, child_process, csv_backend, tracker
from lab.tracking.csv_backend import CsvBackend
from lab.tracking.options import WandbConfig
from tracker_runs import CONFIG, EVENTS, GIT, PROVENANCE, csv_rows, logger, record
from wandb_reader import find_run_files, read_run


@pytest.fixture(autouse=True)
def no_wandb_env(monkeypatch, tmp_path):
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # an empty, private netrc: wandb stays offline


# --------------------------------------------------------------------------- csv
@pytest.mark.integration  # starts git (provenance/git.diff)
def test_csv_has_a_row_per_event_a_growing_header_and_the_config(tmp_path):
    summary = record(tmp_path, "csv")
    header, rows = csv_rows(tmp_path)
    assert header == [
        "step",
        "epoch",
        "train/loss",
        "train/lr",
        "val/loss",
        "val/acc",
        "train/grad_norm",
        "test/acc",
    ]
    assert [(r["step"], r["epoch"]) for r in rows] == [("1", "1"), ("2", "1"), ("2", "1"), ("3", "2"), ("3", "")]
    assert [r["train/loss"] for r in rows] == ["2.0", "1.5", "", "1.0", ""]  # earlier rows: empty new cells
    assert rows[2]["val/acc"] == "0.5" and rows[3]["train/grad_norm"] == "nan" and rows[4]["test/acc"] == "0.75"
    config = yaml.safe_load((tmp_path / "csv/config.yaml").read_text())
    assert config == {**CONFIG, "provenance": GIT}
    assert summary["status"] == "completed" and "wandb_id" not in summary
    assert not (tmp_path / "wandb").exists()


# --------------------------------------------------------------------------- all at once, and resumed
@pytest.mark.integration  # starts wandb's processes and git
def test_every_tracker_records_the_same_events_as_metrics_jsonl(tmp_path):
    summary = record(tmp_path, "wandb", "csv")
    local = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    expected = [(step, metrics["train/loss"]) for metrics, step, _ in EVENTS if "train/loss" in metrics]
    assert [(r["step"], r["train/loss"]) for r in local if "train/loss" in r] == expected

    (run_file,) = find_run_files(tmp_path / "wandb")
    run = read_run(run_file)
    assert [(r["_step"], r["train/loss"]) for r in run.history if "train/loss" in r] == expected
    assert run.run_id == summary["wandb_id"] and run.config["provenance"] == GIT and run.config["seed"] == 3
    _, rows = csv_rows(tmp_path)
    assert [(int(r["step"]), float(r["train/loss"])) for r in rows if r["train/loss"]] == expected


@pytest.mark.integration  # starts wandb's processes and git
def test_a_resumed_run_continues_each_record(tmp_path):
    first = record(tmp_path, "wandb", "csv", events=EVENTS[:3])
    second = record(tmp_path, "wandb", "csv", events=EVENTS[3:], resume_id=first["wandb_id"], continuing=True)

    assert second["wandb_id"] == first["wandb_id"]  # the same wandb run, continued
    runs = [read_run(path) for path in find_run_files(tmp_path / "wandb")]
    assert [r.run_id for r in runs] == [first["wandb_id"]] * 2
    # wandb joins the events of one step into one history row: steps 1-2 before the stop, 3 after it
    assert sorted([row["_step"] for row in r.history] for r in runs) == [[1, 2], [3]]

    local = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in local] == [1, 2, 2, 3, 3]  # appended, not replaced
    header, rows = csv_rows(tmp_path)
    assert [r["step"] for r in rows] == ["1", "2", "2", "3", "3"] and header[-1] == "test/acc"


def _steps(run_dir: Path) -> tuple[list[int], list[int]]:
    """The steps of metrics.jsonl and csv/metrics.csv, each read back in full."""
    local = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return local, [int(row["step"]) for row in csv_rows(run_dir)[1]]


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_a_new_run_in_the_same_dir_starts_each_record_afresh(tmp_path):
    """overwrite=true: the run it replaces leaves no lines above its own."""
    record(tmp_path, "csv")
    record(tmp_path, "csv", continuing=True)  # a second attempt of that run, to be replaced too
    assert _steps(tmp_path) == ([1, 2, 2, 3, 3] * 2, [1, 2, 2, 3, 3] * 2)
    assert (tmp_path / "provenance/attempt-2/env.json").is_file()

    replacing = [({"train/loss": 9.0}, 1, 1), ({"train/loss": 8.0}, 2, 1)]
    record(tmp_path, "csv", events=replacing)
    assert _steps(tmp_path) == ([1, 2], [1, 2])
    assert [float(row["train/loss"]) for row in csv_rows(tmp_path)[1]] == [9.0, 8.0]
    assert sorted(p.name for p in (tmp_path / "provenance").iterdir()) == ["env.json", "git.diff"]


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_a_continuing_run_drops_a_last_line_its_killed_attempt_cut_short(tmp_path, caplog):
    record(tmp_path, "csv", events=EVENTS[:3])
    with open(tmp_path / "metrics.jsonl", "a") as jsonl, open(tmp_path / "csv/metrics.csv", "a") as rows:
        jsonl.write('{"step": 3, "epoch": 2, "train/lo')  # killed mid-write: no newline
        rows.write("3,2,1.")
    record(tmp_path, "csv", events=EVENTS[3:], continuing=True)

    local = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("train/loss")) for r in local] == [(1, 2.0), (2, 1.5), (2, None), (3, 1.0), (3, None)]
    header, rows = csv_rows(tmp_path)
    assert [(r["step"], r["train/loss"]) for r in rows] == [
        ("1", "2.0"),
        ("2", "1.5"),
        ("2", ""),
        ("3", "1.0"),
        ("3", ""),
    ]
    assert header[-1] == "test/acc" and all(None not in row for row in rows)  # no row longer than the header
    assert caplog.text.count("dropped a last line cut short") == 2


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_a_resume_drops_what_its_killed_attempt_logged_after_the_checkpoint(tmp_path):
    """Killed at step 5 with last.pt at step 3: steps 4-5 are done again, and each record holds them once."""
    first = [({"train/loss": 1.0 / step}, step, 1) for step in range(1, 6)]
    again = [({"train/loss": 10.0 + step}, step, 1) for step in range(4, 7)]
    record(tmp_path, "csv", events=first)
    tracker = Tracker(tmp_path, logger_cfg=logger("csv"), continuing=True, resumed_step=3)
    with tracker.session():
        for metrics, step, epoch in again:
            tracker.log(metrics, step=step, epoch=epoch)

    expected = [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 14.0), (5, 15.0), (6, 16.0)]
    local = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train/loss"]) for r in local] == expected
    header, rows = csv_rows(tmp_path)
    assert [(int(r["step"]), float(r["train/loss"])) for r in rows] == expected and header[:2] == ["step", "epoch"]
    assert (tmp_path / "csv/metrics.csv").read_bytes().count(b"\r\n") == len(rows) + 1  # csv's line ends kept


def test_ctrl_c_records_the_run_as_interrupted(tmp_path):
    with pytest.raises(KeyboardInterrupt), Tracker(tmp_path, logger_cfg=logger("csv")).session():
        raise KeyboardInterrupt
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "interrupted"


# the trackers writing a folder of the run dir from this process: csv, and those the extensions add
IN_PROCESS = [name for name in trackers() if backends.backend(name).folder and not backends.backend(name).slow_to_start]


@pytest.mark.parametrize("name", IN_PROCESS)
def test_a_folder_that_cannot_be_written_is_one_line_before_anything_is_written(tmp_path, monkeypatch, name):
    run_dir, folder = tmp_path / "run", backends.backend(name).folder
    (run_dir / folder).mkdir(parents=True)
    if os.geteuid() == 0:  # root writes whatever the mode says: have the OS answer as it would a user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path).name != folder and real_access(path, mode))
    (run_dir / folder).chmod(0o555)
    try:
        with pytest.raises(UserError, match=rf"^cannot write {run_dir / folder}: permission denied: .*chmod u\+w"):
            Tracker(run_dir, logger_cfg=logger(*IN_PROCESS), provenance=PROVENANCE).start()
    finally:
        (run_dir / folder).chmod(0o755)
    assert [p.name for p in run_dir.iterdir()] == [folder] and not list((run_dir / folder).iterdir())


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_an_error_writing_a_trackers_folder_names_it_and_the_fix(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(csv_backend, "open_record", read_only)
    with pytest.raises(UserError, match=rf"^cannot write {tmp_path / 'csv'}: read-only file system: choose a"):
        Tracker(tmp_path, logger_cfg=logger("csv"), provenance=PROVENANCE).start()


@pytest.mark.integration  # starts wandb's processes and git
def test_run_ref_names_the_wandb_run_or_none(tmp_path):
    tracker = Tracker(tmp_path / "plain", logger_cfg=logger("csv")).start()
    assert tracker.run_ref() == {"run_dir": str(tmp_path / "plain"), "wandb_id": None, "wandb_path": None}
    tracker.finish()
    tracker = Tracker(tmp_path / "w", logger_cfg=logger("wandb"), resume_id="abcd1234").start()
    assert tracker.run_ref()["wandb_id"] == "abcd1234"  # a resume id wandb has not seen: a new run of that id
    tracker.finish()
    child_process.close()


@pytest.mark.integration  # starts wandb's processes and git
def test_a_tracker_that_fails_to_start_closes_the_others(tmp_path, monkeypatch):
    def broken(self):
        raise OSError("disk full")

    monkeypatch.setattr(CsvBackend, "start", broken)
    tracker = Tracker(tmp_path, logger_cfg=logger("wandb", "csv"), provenance=PROVENANCE)
    with pytest.raises(OSError, match="disk full"):
        tracker.start()
    child_process.close()
    assert tracker.backends == [] and tracker.run_ref()["wandb_id"] is None
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"
    (run_file,) = find_run_files(tmp_path / "wandb")
    assert read_run(run_file).exit_code == 1  # the wandb run was finished, as failed


def test_a_tracker_that_stops_as_it_starts_is_named_and_the_others_record(tmp_path, monkeypatch, caplog, fork_tracker):
    def child_died(self):
        raise backends.TrackerStopped("its child process was killed (SIGKILL)")

    monkeypatch.setattr(CsvBackend, "start", child_died)
    with Tracker(tmp_path, logger_cfg=logger("csv", "memory")).session(background=True) as tracker:
        tracker.log({"train/loss": 1.0}, step=1)
        assert [b.name for b in tracker.backends] == ["memory"]
    assert "tracker csv stopped: its child process was killed (SIGKILL). The run goes on" in caplog.text
    assert _ListBackend.seen[1:] == [(1, {"train/loss": 1.0})]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"


@pytest.mark.integration  # starts wandb's processes and git
def test_a_start_in_the_background_is_waited_for_and_its_failure_raised_at_first_use(tmp_path, monkeypatch):
    tracker = Tracker(tmp_path / "ok", logger_cfg=logger("wandb", "csv"), config=CONFIG, provenance=PROVENANCE)
    with tracker.session(background=True):
        tracker.log({"train/loss": 1.0}, step=1)
        assert tracker.run_ref()["wandb_id"] is not None and [b.name for b in tracker.backends] == ["wandb", "csv"]
    child_process.close()
    assert csv_rows(tmp_path / "ok")[1][0]["train/loss"] == "1.0"

    def broken(self):
        raise OSError("disk full")

    monkeypatch.setattr(CsvBackend, "start", broken)
    tracker = Tracker(tmp_path / "broken", logger_cfg=logger("csv"), provenance=PROVENANCE)
    with pytest.raises(OSError, match="disk full"), tracker.session(background=True):
        tracker.log({"train/loss": 1.0}, step=1)
    assert json.loads((tmp_path / "broken/summary.json").read_text())["status"] == "failed"


# --------------------------------------------------------------------------- choosing trackers
@pytest.mark.parametrize(
    ("overrides", "chosen"),
    [
        ([], ["wandb"]),
        (["logger=none"], []),
        (["logger=csv"], ["csv"]),
        (["logger=[wandb,csv]"], ["wandb", "csv"]),
        (["logger=[csv]", "logger.wandb.mode=offline"], ["csv"]),
        (["logger.backends.wandb=false"], []),
        (["logger.backends.csv=true"], ["wandb", "csv"]),  # every tracker is a key: no `+`
        (["logger=none", "logger.backends.csv=true"], ["csv"]),
    ],
)
def test_the_logger_group_chooses_the_trackers(compose, overrides, chosen):
    cfg = compose(overrides)
    validate(cfg)
    assert sorted(backends.chosen(cfg.logger)) == sorted(chosen)
    order = backends.in_start_order(cfg.logger)  # wandb (slow to start: a child process) first
    assert sorted(order) == sorted(chosen) and ("wandb" not in chosen or order[0] == "wandb")


def test_every_tracker_is_a_switch_a_settings_node_and_a_logger_option(compose):
    """Derived from the registered TrackerConfig classes: no list of trackers anywhere else."""
    cfg = compose([])
    assert set(cfg.logger.backends) == set(trackers())
    for name, option in trackers().items():
        assert OmegaConf.get_type(cfg.logger[name]) is option
        assert backends.chosen(compose([f"logger={name}"]).logger) == [name]


def test_a_trackers_settings_override_without_plus_and_are_checked(compose):
    cfg = compose(["logger.wandb.mode=offline", "logger.wandb.project=mine", "logger.wandb.tags=[a,b]"])
    validate(cfg)
    settings = backends.tracker_settings(cfg.logger, "wandb")
    assert isinstance(settings, WandbConfig) and (settings.mode, settings.project, settings.tags) == (
        "offline",
        "mine",
        ["a", "b"],
    )
    with pytest.raises(ConfigError, match=r"logger\.wandb\.mode"):
        validate(compose(["logger.wandb.mode=sometimes"]))


def test_an_unknown_tracker_is_refused_naming_the_choices(compose):
    choices = ", ".join(trackers())
    with pytest.raises(ConfigError, match=rf"logger\.backends\.neptune is not a tracker; choose among {choices}"):
        validate(compose(["+logger.backends.neptune=true"]))


def test_each_known_tracker_has_a_backend_class():
    for name in trackers():
        backend = tracker.create(name, backends.RunInfo(run_dir=Path("unused")))
        assert isinstance(backend, backends.Backend) and backend.name == name


# --------------------------------------------------------------------------- a fork's tracker
class _ListBackend(backends.Backend):
    """A fork's tracker: keeps what it is given in memory."""

    name = "memory"
    seen: list = []

    def start(self) -> None:
        _ListBackend.seen = [("start", self.run.settings.prefix, self.run.git["git_branch"])]

    def log(self, metrics, step, epoch) -> None:
        _ListBackend.seen.append((step, {f"{self.run.settings.prefix}{k}": v for k, v in metrics.items()}))


@pytest.fixture
def fork_tracker():
    """A TrackerConfig defined here, as a fork's module of src/lab/config/ would; unregistered afterwards."""
    from dataclasses import dataclass

    @dataclass
    class MemoryConfig(TrackerConfig):
        prefix: str = ""

        def backend(self) -> type:
            return _ListBackend

    lab.config.register()  # what importing a module of lab/config/ does: the stored schemas now know it
    yield MemoryConfig
    forget_option(MemoryConfig)


def test_a_fork_adds_a_tracker_with_one_class(compose, fork_tracker, tmp_path):
    cfg = compose(["logger=[csv,memory]", "logger.memory.prefix=fork/"])  # a switch, a settings node, a preset
    validate(cfg)
    assert OmegaConf.get_type(cfg.logger.memory) is fork_tracker and cfg.logger.backends.memory
    provenance = {"git_commit": None, "git_branch": "fork"}  # no commit: no `git diff` in the fast tier
    with Tracker(tmp_path, logger_cfg=cfg.logger, provenance=provenance).session() as tracker:
        tracker.log({"loss": 1.0}, step=1)
    assert _ListBackend.seen == [("start", "fork/", "fork"), (1, {"fork/loss": 1.0})]
    assert (tmp_path / "csv" / "metrics.csv").is_file()


def test_a_tracker_may_not_take_a_name_the_logger_node_uses():
    from dataclasses import dataclass

    @dataclass
    class ChildProcessConfig(TrackerConfig):  # `child_process`: a key of logger already
        pass

    try:
        with pytest.raises(ValueError, match="tracker 'child_process' is named like a key of logger"):
            logger_schema()
    finally:
        forget_option(ChildProcessConfig)
    assert "child_process" not in trackers() and logger_schema()
