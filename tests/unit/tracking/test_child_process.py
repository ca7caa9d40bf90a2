"""wandb in a child process (lab.tracking.child_process): what the child logs and raises reaches this process, a
run killed without finishing keeps what it logged and is recorded as failed, and logger.child_process=false keeps
wandb in this process."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lab.config.trackers import logger_config
from lab.tracking import Tracker, child_process
from lab.tracking.child_process import ChildProcessBackend
from lab.tracking.options import WandbConfig
from lab.tracking.wandb_backend import WandbBackend
from wandb_reader import CorruptRunFile, find_run_files, read_run


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    yield
    child_process.close()


def _logger(**settings) -> OmegaConf:
    return OmegaConf.structured(logger_config(backends={"wandb": True}, wandb=WandbConfig(mode="offline"), **settings))


@pytest.mark.integration  # starts wandb's processes
def test_the_childs_logs_and_errors_reach_this_process(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    tracker = Tracker(tmp_path, logger_cfg=_logger()).start()
    assert isinstance(tracker.backends[0], ChildProcessBackend)
    tracker.save_file(tmp_path / "missing.txt")  # fails in the child; nothing waits for it
    wandb_id = tracker.run_ref()["wandb_id"]  # waits: the child's log lines and the earlier error arrive first
    assert f"wandb run {wandb_id} (offline)" in caplog.text
    assert "the tracker process:" in caplog.text and "missing.txt" in caplog.text

    tracker.save_file(tmp_path / "missing-too.txt")
    assert tracker.backends[0].child.answers.poll(60)  # the child has answered (its error), not yet raised here
    with pytest.raises(FileNotFoundError, match=r"missing-too\.txt"):
        tracker.log({"train/loss": 1.0}, step=1)
    tracker.finish()


@pytest.mark.integration  # starts wandb's processes
def test_a_killed_child_stops_its_tracker_with_one_warning_and_the_run_goes_on(tmp_path, caplog):
    logger = OmegaConf.structured(
        logger_config(backends={"wandb": True, "csv": True}, wandb=WandbConfig(mode="offline"))
    )
    tracker = Tracker(tmp_path, logger_cfg=logger).start()
    tracker.log({"train/loss": 1.0}, step=1)
    child = tracker.backends[0].child
    child.process.send_signal(signal.SIGKILL)  # an OOM kill, `kill -9`
    child.process.wait()
    with caplog.at_level(logging.WARNING):
        for step in (2, 3):
            tracker.log({"train/loss": 1.0 / step}, step=step)
        tracker.summary({"val/acc_best": 0.5})
        assert tracker.run_ref()["wandb_id"] is None
        assert [b.name for b in tracker.backends] == ["csv"]
        tracker.finish()  # asks nothing of the dead child: no second warning, no "could not finish"

    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.name == "lab.tracking.tracker" and "\n" not in warning.getMessage()
    assert re.fullmatch(
        r"tracker wandb stopped: its child process was killed \(SIGKILL\); logger\.child_process=false .*\. "
        rf"The run goes on without it: its metrics are still in {re.escape(str(tmp_path / 'metrics.jsonl'))}",
        warning.getMessage(),
    )
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
    assert len((tmp_path / "csv/metrics.csv").read_text().splitlines()) == 4  # header + 3 rows: csv went on
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["val/acc_best"] == 0.5


KILLED_RUN = """
import os, sys
from omegaconf import OmegaConf
from lab.config.trackers import logger_config
from lab.tracking.options import WandbConfig
from lab.tracking import Tracker, child_process
logger = logger_config(backends={"wandb": True}, wandb=WandbConfig(mode="offline"))
tracker = Tracker(sys.argv[1], logger_cfg=OmegaConf.structured(logger))
tracker.start()
for step in (1, 2, 3):
    tracker.log({"train/loss": 1.0 / step}, step=step)
os._exit(0)  # as a killed process: no finish, no atexit
"""


@pytest.mark.integration  # starts wandb's processes
def test_a_run_killed_before_finishing_keeps_what_it_logged_and_is_recorded_as_failed(tmp_path):
    subprocess.run([sys.executable, "-c", KILLED_RUN, str(tmp_path)], check=True, timeout=120)
    deadline = time.monotonic() + 120  # the orphaned child finishes the record on its own: a hang must end
    while (run := _finished_run(tmp_path / "wandb")) is None:
        assert time.monotonic() < deadline, "the tracker's child process never finished the killed run's record"
        time.sleep(0.2)
    assert [row["train/loss"] for row in run.history] == [1.0, 0.5, 1 / 3]
    assert run.exit_code == 1


def _finished_run(root: Path):
    try:
        (path,) = find_run_files(root)
        run = read_run(path)
    except (ValueError, CorruptRunFile):  # not there yet, or still being written
        return None
    return run if run.exit_code is not None else None


@pytest.mark.integration  # starts wandb's processes
def test_child_process_false_keeps_wandb_in_this_process(tmp_path):
    tracker = Tracker(tmp_path, logger_cfg=_logger(child_process=False)).start()
    assert isinstance(tracker.backends[0], WandbBackend)
    tracker.finish()


def test_a_fork_waits_until_the_child_process_is_started(monkeypatch):
    """A DataLoader worker forked (by another thread) while Popen runs would hold Popen's exec-status pipe and hang
    it: the fork must come after Popen returned and the child's pipe ends were closed here."""
    import os
    import threading

    events: list[str] = []
    started = threading.Event()

    class SlowPopen:
        def __init__(self, *args, **kwargs) -> None:
            started.set()
            time.sleep(0.5)  # the fork below is asked for meanwhile
            events.append("popen returned")

    monkeypatch.setattr(child_process.subprocess, "Popen", SlowPopen)
    starting = threading.Thread(target=child_process._Child)
    starting.start()
    started.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    events.append("forked")
    os.waitpid(pid, 0)
    starting.join()
    assert events == ["popen returned", "forked"]
