"""lab.run_dir in-process: which explicit run dirs are refused before Hydra writes, how a refused start is undone,
and which run `resume=` continues."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lab import run_dir as run_dirs
from lab.errors import UserError

CONFIG = {"seed": 1, "trainer": {"max_epochs": 3, "max_steps": -1}, "model": {"name": "mlp"}}


def _run(path: Path, status: str | None = "interrupted", epoch: int = 1, config: dict = CONFIG) -> Path:
    """A run dir as training leaves it: .hydra/, a last.pt at `epoch`, and a summary with `status` (None: none)."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (path / "checkpoints").mkdir()
    progress = {"epoch": epoch, "global_step": 10 * epoch}
    torch.save({"format_version": 1, "model": {}, "config": config, "progress": progress}, path / "checkpoints/last.pt")
    if status is not None:
        (path / "summary.json").write_text(json.dumps({"status": status}))
    return path


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_dir_holding_a_finished_run_is_refused(tmp_path) -> None:
    done = _run(tmp_path / "done", status="completed")
    before = _tree(done)
    with pytest.raises(UserError, match=r"holds another run .*overwrite=true"):
        run_dirs.check(done, "train", {})
    assert _tree(done) == before and not (done / run_dirs.LOCK).exists()
    assert run_dirs.check(done, "train", {"overwrite": True}) is None


def test_a_single_run_never_writes_into_a_sweep_dir(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    for starts in ({}, {"resume": "auto"}, {"overwrite": True}):
        with pytest.raises(UserError, match=r"is a sweep dir .*never writes into a sweep"):
            run_dirs.check(sweep, "train", starts)


@pytest.mark.parametrize("script", ["eval", "export", "infer", "lr_find"])
def test_eval_export_infer_never_write_into_a_run(tmp_path, script) -> None:
    done = _run(tmp_path / "done", status="completed")
    with pytest.raises(UserError, match=f"{script} writes a run dir of its own"):
        run_dirs.check(done, script, {"ckpt_path": "x.pt"})
    assert run_dirs.check(tmp_path / "new", script, {}) is None


def test_resume_auto_on_an_unfinished_run_continues_in_place_keeping_its_hydra_dir(tmp_path) -> None:
    job = _run(tmp_path / "job", status=None)  # killed before summary.json
    assert run_dirs.check(job, "train", {"resume": "auto"}) == ".hydra/attempt-2"
    (job / ".hydra" / "attempt-2").mkdir()
    assert run_dirs.check(job, "train", {"resume": "auto"}) == ".hydra/attempt-3"
    done = _run(tmp_path / "done", status="completed")
    with pytest.raises(UserError, match="holds a run that has finished, so resume=auto has nothing to continue"):
        run_dirs.check(done, "train", {"resume": "auto"})


def test_a_requeued_slurm_job_continues_in_its_own_dir(tmp_path, monkeypatch) -> None:
    job = _run(tmp_path / "job", status="interrupted")
    assert run_dirs.continued_run(None, job, CONFIG) is None
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert run_dirs.continued_run(None, job, CONFIG) == job
    assert run_dirs.check(job, "train", {}) == ".hydra/attempt-2"


def test_resume_auto_takes_its_own_dir_first_then_the_newest_sibling_with_training_left(tmp_path) -> None:
    own = _run(tmp_path / "runs" / "own", status="failed")  # a killed tracker or loader worker: last.pt is good
    assert run_dirs.continued_run("auto", own, CONFIG) == own
    other = {**CONFIG, "seed": 2}
    with pytest.raises(UserError, match=r"unfinished run of another config \(seed differ\)"):
        run_dirs.continued_run("auto", own, other)
    _run(tmp_path / "runs" / "over", status="interrupted", epoch=3)  # interrupted after its last epoch
    fresh = tmp_path / "runs" / "fresh"
    fresh.mkdir()
    assert run_dirs.continued_run("auto", fresh, CONFIG) == own
    assert run_dirs.continued_run("auto", fresh, {**CONFIG, "seed": 3}) is None


def test_a_refused_start_removes_only_what_hydra_wrote(tmp_path) -> None:
    notes = tmp_path / "my_notes"
    notes.mkdir()
    (notes / "important.txt").write_text("precious")
    (notes / "train.log").write_text("the user's own log\n")
    run_dirs.check(notes, "train", {})
    (notes / ".hydra").mkdir()  # what Hydra writes for the job
    (notes / ".hydra" / "config.yaml").write_text("seed: 1\n")
    with open(notes / "train.log", "a") as log:
        log.write("[lab][ERROR] refused\n")
    assert run_dirs.discard_hydra_files(notes)
    assert _tree(notes) == {"important.txt": b"precious", "train.log": b"the user's own log\n"}

    fresh = tmp_path / "fresh"  # a dir Hydra made for this process: removed once empty
    (fresh / ".hydra").mkdir(parents=True)
    (fresh / "train.log").write_text("x\n")
    assert run_dirs.discard_hydra_files(fresh) and not fresh.exists()


def test_a_run_that_wrote_its_own_records_keeps_them(tmp_path) -> None:
    started = tmp_path / "started"
    (started / ".hydra").mkdir(parents=True)
    (started / "metrics.jsonl").write_text('{"step": 1}\n')
    assert not run_dirs.discard_hydra_files(started)
    assert (started / ".hydra").is_dir() and (started / "metrics.jsonl").is_file()


def test_a_refused_claim_leaves_no_lock(tmp_path) -> None:
    done = _run(tmp_path / "done", status="completed")
    with pytest.raises(UserError, match="holds another run's checkpoints"), run_dirs.claim(done, False, False):
        pass
    assert not (done / run_dirs.LOCK).exists()
    with run_dirs.claim(done, True, False):
        assert run_dirs.is_held(done)
        with pytest.raises(UserError, match="is in use by a running job"):
            run_dirs.check(done, "train", {"resume": str(done)})
    assert not run_dirs.is_held(done) and not (done / run_dirs.LOCK).exists()


def test_an_unwritable_run_dir_is_one_line(tmp_path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match=r"file is a file, not a directory"):
        run_dirs.check(tmp_path / "file" / "run", "train", {})
    with pytest.raises(UserError, match="is over 255 bytes"):
        run_dirs.check(tmp_path / ("x" * 300), "train", {})
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # root may write anywhere: pretend a read-only mount
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((0,) * 8 + (os.ST_RDONLY, 255)))
    with pytest.raises(UserError, match=r"is on a read-only file system; choose a writable hydra\.run\.dir"):
        run_dirs.check(tmp_path / "run", "train", {})


def test_overwrite_forgets_the_replaced_runs_later_attempts_and_log_lines_only(tmp_path) -> None:
    done = _run(tmp_path / "done", status="completed")
    (done / ".hydra" / "attempt-2").mkdir()
    (done / ".hydra" / "attempt-2" / "config.yaml").write_text("seed: 1\n")
    (done / "train.log").write_text("the replaced run\n")
    assert run_dirs.check(done, "train", {"overwrite": True}) is None
    with open(done / "train.log", "a") as log:  # as Hydra's log handler appends
        log.write("this run\n")
        run_dirs.forget_replaced(done)
        log.write("goes on\n")
    assert _tree(done / ".hydra") == {"config.yaml": b"seed: 1\n"}
    assert (done / "train.log").read_text() == "this run\ngoes on\n"


def test_a_sweep_job_continues_only_in_its_own_dir(tmp_path) -> None:
    _run(tmp_path / "sweep" / "0", status="interrupted")  # job 0 of the sweep, same config
    job1 = tmp_path / "sweep" / "1"
    job1.mkdir()
    assert run_dirs.continued_run("auto", job1, CONFIG, siblings=False) is None
    assert run_dirs.continued_run("auto", job1, CONFIG) == tmp_path / "sweep" / "0"


def _torchrun_worker(monkeypatch, job: str, restart: int, max_restarts: int = 3) -> None:
    """This process as rank 0 of torchrun job `job` (its --rdzv-id), on attempt `restart`."""
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", job)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restart))
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", str(max_restarts))


def test_a_torchrun_restart_continues_its_own_jobs_dir_only(tmp_path, monkeypatch) -> None:
    _torchrun_worker(monkeypatch, "job-a", restart=0)
    first = tmp_path / "runs" / "first"
    (first / ".hydra").mkdir(parents=True)  # the failed attempt died before its first last.pt
    run_dirs.record_torchrun_job(first)
    assert json.loads((first / "torchrun.json").read_text()) == {"rdzv_id": "job-a"}
    _torchrun_worker(monkeypatch, "job-b", restart=0)
    other = _run(tmp_path / "runs" / "other", status=None)  # another job's unfinished run, newer
    run_dirs.record_torchrun_job(other)
    fresh = tmp_path / "runs" / "fresh"  # the timestamped dir Hydra made for this attempt
    fresh.mkdir()

    _torchrun_worker(monkeypatch, "job-a", restart=0)
    assert run_dirs.continued_run(None, fresh, CONFIG) is None  # a first attempt is a new run
    _torchrun_worker(monkeypatch, "job-a", restart=1)
    assert run_dirs.continued_run(None, fresh, CONFIG) == first  # no last.pt there: it starts again in that dir
    assert run_dirs.continued_run("auto", fresh, CONFIG) == first  # not the newest unfinished run of the config
    # an explicit run dir (the sbatch script's) is continued in place
    assert run_dirs.check(first, "train", {}) == ".hydra/attempt-2"
    _torchrun_worker(monkeypatch, "job-b", restart=1)
    assert run_dirs.continued_run(None, fresh, CONFIG) == other  # with its last.pt
    with pytest.raises(UserError, match="unfinished run of another config"):
        run_dirs.continued_run(None, fresh, {**CONFIG, "seed": 2})
    _torchrun_worker(monkeypatch, "job-c", restart=1)  # a job no dir records: a new run, and no one else's dir
    assert run_dirs.continued_run(None, fresh, CONFIG) is None
    with pytest.raises(UserError, match="holds another run"):
        run_dirs.check(first, "train", {})

    # a requeued SLURM job runs torchrun again under the same rendezvous id (the job id): its attempts count from 0
    _torchrun_worker(monkeypatch, "job-a", restart=0)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert run_dirs.continued_run(None, fresh, CONFIG) == first
    # a torchrun job that cannot restart records nothing
    _torchrun_worker(monkeypatch, "job-d", restart=0, max_restarts=0)
    run_dirs.record_torchrun_job(fresh)
    assert not (fresh / "torchrun.json").exists()


def _killed_before_its_first_checkpoint(path: Path, config_name: str = "train", mode: str = "RUN") -> Path:
    """A run dir as a kill before the first last.pt leaves it: Hydra's records, a log, a few metrics."""
    (path / ".hydra").mkdir(parents=True)
    hydra = {"hydra": {"mode": mode, "job": {"config_name": config_name}}}
    (path / ".hydra" / "hydra.yaml").write_text(json.dumps(hydra))
    (path / "train.log").write_text("[lab][INFO] device cpu\n")
    (path / "metrics.jsonl").write_text('{"step": 1}\n')
    return path


def test_a_run_killed_before_its_first_checkpoint_starts_again_in_its_own_dir(tmp_path, monkeypatch) -> None:
    killed = _killed_before_its_first_checkpoint(tmp_path / "killed")
    assert run_dirs.check(killed, "train", {"resume": "auto"}) == ".hydra/attempt-2"
    assert run_dirs.continued_run("auto", killed, CONFIG) == killed
    with pytest.raises(UserError, match="holds another run"):
        run_dirs.check(killed, "train", {})  # without resume=auto it is not this run's
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the sbatch script: the same command, requeued
    assert run_dirs.check(killed, "train", {}) == ".hydra/attempt-2"
    assert run_dirs.continued_run(None, killed, CONFIG) == killed


@pytest.mark.parametrize("why", ["finished", "eval run", "sweep job", "checkpoint dir", "unreadable"])
def test_only_a_training_run_that_saved_nothing_and_did_not_finish_starts_again(tmp_path, why) -> None:
    mode = "MULTIRUN" if why == "sweep job" else "RUN"
    other = _killed_before_its_first_checkpoint(tmp_path / "other", "eval" if why == "eval run" else "train", mode)
    if why == "finished":
        (other / "summary.json").write_text(json.dumps({"status": "completed"}))
    if why == "checkpoint dir":
        (other / "checkpoints" / "step-10").mkdir(parents=True)  # a sharded save: no last.pt, but a checkpoint
    if why == "unreadable":
        (other / ".hydra" / "hydra.yaml").write_text("")  # a config cut short: not a record we can read
    with pytest.raises(UserError, match="has nothing to continue there"):
        run_dirs.check(other, "train", {"resume": "auto"})
    assert run_dirs.continued_run("auto", other, CONFIG, siblings=False) is None


def test_a_dir_made_for_this_process_is_never_a_run_to_start_again(tmp_path) -> None:
    fresh = tmp_path / "fresh"
    run_dirs.check(fresh, "train", {"resume": "auto"})  # new: Hydra makes it and writes its .hydra/ next
    _killed_before_its_first_checkpoint(fresh)
    assert run_dirs.continued_run("auto", fresh, CONFIG, siblings=False) is None
