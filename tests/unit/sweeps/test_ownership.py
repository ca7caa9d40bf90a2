"""A sweep dir is owned like a run dir (lab.sweeps.ownership): an earlier sweep's dir is refused before anything is
written, a running sweep's lock refuses a second one, `resume=auto` keeps the completed jobs of the same sweep; the
sweep summary and the preemption message read the same job records."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from helpers import REPO, script_env
from lab.errors import UserError
from lab.run_dir import LOCK
from lab.sweeps import ownership
from lab.sweeps.jobs import NumberedLauncher, launch_numbered, launcher_width
from lab.sweeps.ownership import check_resumable, check_sweep_dir_before_hydra, claim
from lab.sweeps.summary import collect, job_record, write_record


def _job(sweep: Path, num: int, overrides: list[str], status: str | None, mode: str = "MULTIRUN") -> Path:
    """A job dir as a sweep leaves it: Hydra's record of its start, and sweep_job.json unless it was killed."""
    job_dir = sweep / str(num)
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job_dir / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": mode, "job": {"num": num}}}))
    if status is not None:
        error = None if status == "completed" else "UserError: bad"
        write_record(job_dir, job_record(num, status, 0.5, error, overrides, (), start=0.0, wall_s=1.0, pid=1))
    return job_dir


def _earlier_sweep(sweep: Path) -> Path:
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("seed: 1\n")
    _job(sweep, 0, ["seed=1"], "completed")
    _job(sweep, 1, ["seed=2"], "failed")
    return sweep


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    "override", ["hydra.sweep.dir={}", "hydra.sweep.dir='{}'", "++hydra.sweep.dir={}", "+hydra.sweep.dir={}"]
)
def test_an_earlier_sweeps_dir_is_refused_before_hydra_however_the_override_is_written(tmp_path, override):
    sweep = _earlier_sweep(tmp_path / "sweep")
    with pytest.raises(UserError) as err:
        check_sweep_dir_before_hydra(["train.py", "-m", "seed=1,2", override.format(sweep)])
    message = str(err.value)
    assert "\n" not in message and f"{sweep} holds an earlier sweep (2 job dirs)" in message
    assert "leave hydra.sweep.dir unset" in message and "pick another dir" in message and "resume=auto" in message


def test_the_check_before_hydra_refuses_only_sweeps_that_would_write_there(tmp_path):
    sweep = _earlier_sweep(tmp_path / "sweep")
    check_sweep_dir_before_hydra(["train.py", "seed=1", f"hydra.sweep.dir={sweep}"])  # a single run: not a sweep
    check_sweep_dir_before_hydra(["train.py", "-m", "seed=1,2", f"hydra.sweep.dir={sweep}", "resume=auto"])
    check_sweep_dir_before_hydra(["train.py", "-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'new'}"])
    with pytest.raises(UserError, match="holds an earlier sweep"):  # hparams_search configs set hydra.mode=MULTIRUN
        check_sweep_dir_before_hydra(["train.py", "hparams_search=optuna", f"hydra.sweep.dir={sweep}"])
    with pytest.raises(UserError, match="holds an earlier sweep"):
        check_sweep_dir_before_hydra(["train.py", "--multirun", "-cn", "train", f"hydra.sweep.dir={sweep}"])


def test_a_refused_claim_writes_nothing_and_leaves_no_lock(tmp_path, capsys):
    sweep = _earlier_sweep(tmp_path / "sweep")
    before = _snapshot(sweep)
    with pytest.raises(SystemExit) as exit_info, claim(sweep, resuming=False):
        pytest.fail("a refused claim runs nothing")
    assert str(exit_info.value.code).startswith(f"error: {sweep} holds an earlier sweep")
    assert _snapshot(sweep) == before and not (sweep / LOCK).exists()


def test_a_claim_holds_the_lock_while_the_sweep_runs_and_removes_it_at_the_end(tmp_path):
    sweep = tmp_path / "new" / "sweep"
    with claim(sweep, resuming=False) as completed:
        assert completed == {}
        assert (sweep / LOCK).read_text().startswith("pid ")
        with pytest.raises(UserError, match="in use by a running sweep"):
            check_sweep_dir_before_hydra(["train.py", "-m", f"hydra.sweep.dir={sweep}", "resume=auto"])
    assert list(sweep.iterdir()) == []


@pytest.mark.integration  # starts a process: a Python subprocess holds the sweep dir
def test_a_running_sweep_refuses_a_second_one_there_and_its_death_frees_the_dir(tmp_path):
    sweep = tmp_path / "sweep"
    holder = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from lab.sweeps.ownership import claim
        with claim(Path({str(sweep)!r}), resuming=False):
            print("held", flush=True)
            time.sleep(300)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], env=script_env(), cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit) as exit_info, claim(sweep, resuming=True):
            pytest.fail("two sweeps never share a dir")
        assert str(exit_info.value.code) == (
            f"error: {sweep} is in use by a running sweep (pid {proc.pid}); two sweeps never share a sweep dir: "
            "leave hydra.sweep.dir unset (every sweep gets its own), pick another dir, or wait for that sweep to end"
        )
        assert (sweep / LOCK).read_text() == f"pid {proc.pid}\n"  # the holder's lock is left alone
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with claim(sweep, resuming=False):  # the OS released the dead sweep's lock; its stale file is taken over
        assert (sweep / LOCK).read_text() == f"pid {os.getpid()}\n"
    assert not (sweep / LOCK).exists()


def test_resume_auto_finds_the_jobs_the_same_sweep_started(tmp_path):
    sweep = _earlier_sweep(tmp_path / "sweep")
    _job(sweep, 2, ["seed=3"], None)  # killed: no sweep_job.json
    jobs = [["seed=1", "resume=auto"], ["seed=2", "resume=auto"], ["seed=3", "resume=auto"], ["seed=4", "resume=auto"]]
    started = check_resumable(sweep, jobs)
    assert {num: job.status for num, job in started.items()} == {0: "completed", 1: "failed", 2: None}
    assert started[0].dir == sweep / "0"
    # how a job starts is not which job it is: a requeued job's ckpt_path, the resume key itself
    assert list(check_resumable(sweep, [["ckpt_path=/x/last.pt", "seed=1"], ["seed=2"], ["seed=3"]])) == [0, 1, 2]
    with claim(sweep, resuming=True, jobs=jobs) as kept:
        assert list(kept) == [0, 1, 2]


@pytest.mark.parametrize(
    ("jobs", "differs"),
    [
        ([["seed=1"], ["seed=2"], ["seed=4"]], "its job #2 ran `seed=3` where this sweep's has `seed=4`"),
        ([["seed=1"], ["seed=2"]], "its job #2 is not among this sweep's 2 jobs"),
        (
            [["seed=1"], ["model=mlp", "seed=2"], ["seed=3"]],
            "job #1 ran no other override where this sweep's has `model=mlp`",
        ),
    ],
)
def test_resume_auto_refuses_a_dir_of_another_sweep_before_writing(tmp_path, jobs, differs):
    sweep = _earlier_sweep(tmp_path / "sweep")
    _job(sweep, 2, ["seed=3"], None)
    before = _snapshot(sweep)
    with pytest.raises(SystemExit) as exit_info, claim(sweep, resuming=True, jobs=jobs):
        pytest.fail("another sweep's dir is not continued")
    message = str(exit_info.value.code)
    assert message.startswith(f"error: resume=auto: {sweep} holds another sweep (") and differs in message
    assert "continue it with the command that started it, or leave hydra.sweep.dir unset" in message
    assert _snapshot(sweep) == before and not (sweep / LOCK).exists()


def test_the_summary_has_a_failed_row_for_a_killed_job_and_no_row_for_a_run_of_its_own(tmp_path):
    sweep = _earlier_sweep(tmp_path / "sweep")
    _job(sweep, 2, ["seed=3", "+callbacks.x={a:1}"], None)  # killed before it recorded its end
    (sweep / "notes" / "0").mkdir(parents=True)  # a user's folder, and a plain run someone put in the sweep dir
    _job(sweep / "notes", 7, ["seed=9"], None, mode="RUN")
    rows = {row.job: row for row in collect(sweep, "val/acc", exclude_keys=["callbacks.x"])}
    assert sorted(rows) == [0, 1, 2]
    assert [rows[n].status for n in (0, 1, 2)] == ["completed", "failed", "failed"]
    assert rows[2].overrides == ["seed=3"] and rows[2].run_dir == str(sweep / "2")
    assert rows[2].error.startswith("no sweep_job.json: the job's process ended before the job did (killed?)")


def test_the_sweep_records_leave_out_resume_auto(tmp_path):
    record = job_record(3, "completed", 0.9, None, ["seed=1", "resume=auto"], (), start=0.0, wall_s=1.0, pid=1)
    assert record["overrides"] == ["seed=1"]  # a relaunched job of a resumed sweep trains what it trained before


def test_a_stop_signal_names_a_command_that_resumes_this_run_only(tmp_path):
    from lab.training.preemption import interrupted

    run = tmp_path / "run"
    message = str(interrupted(signal.SIGTERM, 12, str(run / "checkpoints" / "last.pt")))
    assert message == (
        f"interrupted by SIGTERM after optimizer step 12; saved {run}/checkpoints/last.pt "
        f"(resume: the same command with resume={run})"
    )
    sweep = _earlier_sweep(tmp_path / "sweep")  # a job of a sweep: the sweep command would resume every job from it
    message = str(interrupted(signal.SIGUSR1, 5, str(sweep / "1" / "checkpoints" / "last.pt")))
    assert f"resume the sweep: the same command with hydra.sweep.dir={sweep} resume=auto" in message
    assert "ckpt_path=" not in message and "resume=" + str(sweep / "1") not in message


class _Launcher:
    """A launcher of Hydra's kind: numbers a batch's jobs from one first number."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, int]] = []

    def launch(self, job_overrides, initial_job_idx):
        self.calls.append((job_overrides, initial_job_idx))
        return [f"ret{initial_job_idx + i}" for i in range(len(job_overrides))]


def test_numbered_jobs_go_to_a_plain_launcher_as_runs_of_consecutive_numbers():
    launcher = _Launcher()
    jobs = [(1, ["a=1"]), (2, ["a=2"]), (4, ["a=4"]), (7, ["a=7"]), (8, ["a=8"])]
    assert launch_numbered(launcher, jobs) == ["ret1", "ret2", "ret4", "ret7", "ret8"]
    assert launcher.calls == [([["a=1"], ["a=2"]], 1), ([["a=4"]], 4), ([["a=7"], ["a=8"]], 7)]


class _Wide(NumberedLauncher):
    """A launcher that knows its width only once it runs, as hydra/launcher=ray learns its cluster's size."""

    def __init__(self, width: int | None) -> None:
        self._width = width

    def setup(self, **_) -> None: ...

    def width(self) -> int | None:
        return self._width

    def launch_numbered(self, jobs):
        return []


def test_the_launchers_width_is_its_own_where_it_says_it_else_its_configs():
    config = OmegaConf.create({"hydra": {"launcher": {"n_jobs": 3}}})
    assert launcher_width(config) == launcher_width(config, _Wide(None)) == launcher_width(config, _Launcher()) == 3
    assert launcher_width(config, _Wide(5)) == 5 and launcher_width(config, _Wide(0)) == 1


def test_job_records_are_whole_json(tmp_path):
    write_record(tmp_path / "job", job_record(0, "failed", None, "JobKilled: x", [], (), start=0.0, wall_s=0.0, pid=5))
    assert json.loads((tmp_path / "job" / "sweep_job.json").read_text())["error"] == "JobKilled: x"
    assert [p.name for p in (tmp_path / "job").iterdir()] == ["sweep_job.json"]  # no temp file left
    # a job killed before Hydra recorded its start: the launcher's record alone makes it a job of the sweep
    assert [(job.num, job.status) for job in ownership.read_jobs(tmp_path)] == [(0, "failed")]


@pytest.mark.parametrize("resuming", [False, True])
def test_a_sweep_never_writes_into_a_single_runs_dir(tmp_path, resuming):
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "summary.json").write_text('{"status": "completed"}')
    before = _snapshot(run_dir)
    with pytest.raises(UserError, match=r"hydra.sweep.dir=.*/run holds a single run \(.hydra, summary.json\)"):
        check_sweep_dir_before_hydra(
            ["train.py", "-m", "seed=1,2", f"hydra.sweep.dir={run_dir}"] + ["resume=auto"] * resuming
        )
    with pytest.raises(SystemExit, match="holds a single run"), claim(run_dir, resuming=resuming):
        pytest.fail("a refused claim runs nothing")
    assert _snapshot(run_dir) == before


def test_a_sweep_dir_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    def denied(self, *args, **kwargs):  # a read-only outputs dir, as a user who may not write it sees it
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "mkdir", denied)
    sweep = tmp_path / "read_only" / "sweep"
    with pytest.raises(SystemExit) as exit_info, claim(sweep, resuming=False):
        pytest.fail("a refused claim runs nothing")
    assert exit_info.value.code == (
        f"error: hydra.sweep.dir={sweep}: could not write {sweep} (Permission denied); choose a writable "
        "hydra.sweep.dir (or paths.outputs)"
    )
