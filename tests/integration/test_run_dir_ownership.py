"""A run dir is the user's record: the real scripts never delete, rewrite or mix what another run or the user put
there, and every refusal is one line with nothing written."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import PYTHON, REPO, made_once, plugins_env, run_script, script_env

SMALL = ["model=mlp", "logger=none", "seed=7", "trainer.max_epochs=2", "trainer.log_every_n_steps=1"]


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every file under `root` with its size and modification time: what a refusal must leave as it was."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def interrupted(shared_dir) -> Path:
    """A run stopped by SIGTERM after its third step: last.pt, status interrupted (copied by each test; made once for
    the session's xdist workers)."""
    run_dir = shared_dir / "run_dir_ownership-interrupted"

    def make() -> None:
        cmd = [PYTHON, str(REPO / "scripts" / "train.py"), f"hydra.run.dir={run_dir}", *SMALL]
        env = script_env()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        metrics = run_dir / "metrics.jsonl"
        while proc.poll() is None and not (metrics.is_file() and metrics.read_text().count("train/loss") >= 3):
            time.sleep(0.02)  # not a busy loop: on a 2-core machine it would take a core from the run it waits for
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 143, err[-3000:]

    return made_once(run_dir, make)


def _last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_resume_auto_never_deletes_the_dir_it_was_given(interrupted, tmp_path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(interrupted, runs / "runC")
    notes = runs / "my_notes"
    notes.mkdir()
    (notes / "important.txt").write_text("precious\n")
    proc = run_script("train.py", *SMALL, "resume=auto", f"hydra.run.dir={notes}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in notes.iterdir()) == ["important.txt"]  # Hydra's files there were removed again
    assert json.loads((runs / "runC" / "summary.json").read_text())["status"] == "completed"


def test_resume_auto_in_the_interrupted_runs_own_dir_continues_it_in_place(interrupted, tmp_path) -> None:
    job = shutil.copytree(interrupted, tmp_path / "job")
    original = (job / ".hydra" / "overrides.yaml").read_text()
    proc = run_script("train.py", *SMALL, "resume=auto", f"hydra.run.dir={job}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"
    assert (job / ".hydra" / "overrides.yaml").read_text() == original  # the run's own record stays
    assert "resume=auto" in (job / ".hydra" / "attempt-2" / "overrides.yaml").read_text()
    steps = [json.loads(line)["step"] for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)  # one run, continued: no second run appended from step 1


def test_every_refusal_is_one_line_and_writes_nothing(interrupted, tmp_path) -> None:
    done = shutil.copytree(interrupted, tmp_path / "done")
    finish = run_script("train.py", *SMALL, f"resume={done}", cwd=tmp_path)  # training it to the end first
    assert finish.returncode == 0, finish.stderr[-3000:]
    (tmp_path / "a_file").write_text("")
    before, outputs = _tree(done), tmp_path / "outputs"
    cases = {
        ("train.py", f"resume={done}"): f"{done}/checkpoints/last.pt has finished training (epoch 2",
        ("train.py", f"hydra.run.dir='{done}'"): f"{done} holds another run (.hydra, checkpoints",
        ("train.py", f"++hydra.run.dir={done}"): f"{done} holds another run (.hydra, checkpoints",
        ("train.py", "resume=auto", f"hydra.run.dir={done}"): "holds a run that has finished, so resume=auto",
        ("train.py", f"hydra.run.dir={tmp_path / 'a_file' / 'run'}"): "a_file is a file, not a directory",
        ("train.py", "data.batch_size=5000"): "data.batch_size=5000 is larger than the",  # found with the data
        ("eval.py", f"ckpt_path={done}/checkpoints/best.pt", f"hydra.run.dir={done}"): "eval writes a run dir",
        ("export.py", f"ckpt_path={done}/checkpoints/best.pt", f"hydra.run.dir={done}"): "export writes a run dir",
        ("infer.py", f"ckpt_path={done}/checkpoints/best.pt", f"hydra.run.dir={done}"): "infer writes a run dir",
    }
    for (script, *overrides), message in cases.items():
        proc = run_script(script, *(SMALL if script == "train.py" else []), *overrides, cwd=tmp_path)
        assert proc.returncode == 1 and message in _last_line(proc), (overrides, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert _tree(done) == before, overrides
        # no fresh run dir left behind (Hydra's parents of it, outputs/train/, may stay: empty)
        assert not outputs.exists() or not any(p.name != "train" for p in outputs.rglob("*")), list(outputs.rglob("*"))


def test_torchrun_resume_auto_is_decided_by_rank_zero_for_every_rank(tmp_path) -> None:
    """Every rank runs the script; only rank 0 sees the run dirs (the others get scratch dirs), so resume=auto is
    resolved there and sent to the others: otherwise they would start a new run beside rank 0's resumed one."""
    command = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(REPO / "scripts" / "train.py"), "dist=ddp", *SMALL]
    env = {**script_env(), "TMPDIR": str(tmp_path)}  # where the other ranks make their scratch dirs

    def torchrun(*overrides: str) -> subprocess.Popen:
        args = [*command, *overrides]
        return subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = torchrun()
    runs = tmp_path / "outputs" / "train"
    while first.poll() is None and sum(p.read_text().count("train/loss") for p in runs.glob("*/metrics.jsonl")) < 3:
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)  # torchrun forwards it: every rank saves last.pt and stops
    first.communicate(timeout=300)
    (run,) = list(runs.iterdir())
    stopped = json.loads((run / "summary.json").read_text())
    assert stopped["status"] == "interrupted", stopped

    second = torchrun("resume=auto")
    _, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-3000:]
    assert list(runs.iterdir()) == [run] and not list(tmp_path.glob("lab-rank*"))
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)


def test_every_spelling_of_a_runs_dir_is_checked_where_hydra_resolves_it(interrupted, tmp_path) -> None:
    """`${paths.outputs}/...` and `${oc.env:...}` name the dir only once Hydra resolves them: checked there."""
    runs = tmp_path / "runs"
    job = shutil.copytree(interrupted, runs / "job")
    before = _tree(job)
    last, env = f"ckpt_path={job}/checkpoints/last.pt", {**script_env(), "FIN": str(job)}
    cases = {
        ("eval.py", last, f"paths.outputs={runs}", "hydra.run.dir=${paths.outputs}/job"): "eval writes a run dir",
        ("export.py", last, "hydra.run.dir=${oc.env:FIN}"): "export writes a run dir of its own",
        ("train.py", *SMALL, f"paths.outputs={runs}", "hydra.run.dir=${paths.outputs}/job"): "holds another run",
        ("train.py", *SMALL, "hydra.run.dir=${oc.env:FIN}"): f"{job} holds another run (.hydra, checkpoints",
        ("train.py", *SMALL, "hydra.run.dir=${oc.env:LAB_UNSET}"): "hydra.run.dir cannot be resolved (KeyError",
    }
    for (script, *overrides), message in cases.items():
        proc = run_script(script, *overrides, cwd=tmp_path, env=env)
        assert proc.returncode == 1 and message in _last_line(proc), (overrides, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and _tree(job) == before, overrides


def test_a_resume_refused_for_another_models_checkpoint_leaves_the_run_as_it_was(interrupted, finished_run, tmp_path):
    job = shutil.copytree(interrupted, tmp_path / "job")
    shutil.copy(finished_run / "checkpoints" / "last.pt", job / "checkpoints" / "last.pt")  # the default CNN's
    before = _tree(job)
    proc = run_script("train.py", *SMALL, f"resume={job}", cwd=tmp_path)
    assert proc.returncode == 1 and "does not fit this run's model" in _last_line(proc), proc.stderr[-2000:]
    assert "model.name=cnn" in _last_line(proc) and "Traceback" not in proc.stderr
    assert _tree(job) == before


# SIGKILL (the OOM killer's) right after the start-of-run report: Hydra's records, a log, no checkpoint yet
KILLED_AFTER_THE_START_REPORT = """
import os, signal
from lab.workflows import train

report = train.log_start

def killed(*args, **kwargs):
    result = report(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
    return result

train.log_start = killed
"""


@pytest.mark.parametrize("how", ["resume=auto", "SLURM_RESTART_COUNT=1"])
def test_a_run_killed_before_its_first_checkpoint_is_continued_by_the_same_command(tmp_path, how) -> None:
    job = tmp_path / "job"
    command = ["train.py", *SMALL, f"hydra.run.dir={job}"]
    proc = run_script(*command, cwd=tmp_path, patch=KILLED_AFTER_THE_START_REPORT)
    assert proc.returncode == -signal.SIGKILL and not (job / "checkpoints" / "last.pt").exists(), proc.stderr[-2000:]
    first = (job / ".hydra" / "overrides.yaml").read_text()
    env = {**script_env(), "SLURM_RESTART_COUNT": "1"} if how.startswith("SLURM") else None
    again = run_script(*command, *(["resume=auto"] if how == "resume=auto" else []), cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"
    assert (job / ".hydra" / "overrides.yaml").read_text() == first  # the first attempt's record is kept
    assert (job / ".hydra" / "attempt-2" / "overrides.yaml").is_file()
    log = (job / "train.log").read_text()
    assert log.count("device cpu") == 2 and log.count("done:") == 1  # both attempts, in the run's one log
    records = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    steps = [record["step"] for record in records if "train/loss" in record]
    assert steps == list(range(1, 39))  # one run of 2 x 19 steps: nothing the killed attempt began was kept twice


# A full disk while Hydra writes the run's config: it leaves a 0-byte .hydra/config.yaml, as a real ENOSPC does
DISK_FULL = """
import errno, os
from hydra.core import utils

def save_config(cfg, filename, output_dir):
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / filename).write_text("")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(output_dir / filename))

utils._save_config = save_config
"""

# A read-only outputs dir, as a user who may not write it sees it (the tests run as root, who may write anywhere)
READ_ONLY = """
import os
access = os.access
os.access = lambda path, mode, **kw: False if "read_only" in str(path) else access(path, mode, **kw)
"""


def test_a_full_disk_or_a_read_only_outputs_dir_is_one_line_and_leaves_nothing(tmp_path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "important.txt").write_text("precious\n")
    for run_dir in (notes, tmp_path / "new"):
        proc = run_script("train.py", *SMALL, f"hydra.run.dir={run_dir}", cwd=tmp_path, patch=DISK_FULL)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert _last_line(proc).startswith(f"error: hydra.run.dir={run_dir}: Hydra could not write"), proc.stderr
        assert "No space left on device" in _last_line(proc) and "free some space" in _last_line(proc)
    assert sorted(p.name for p in notes.iterdir()) == ["important.txt"] and not (tmp_path / "new").exists()
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    proc = run_script("train.py", *SMALL, f"paths.outputs={read_only}", cwd=tmp_path, patch=READ_ONLY)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"{read_only} is not writable (permission denied)" in _last_line(proc)
    assert not any(read_only.iterdir())


def test_overwrite_replaces_the_runs_log_too(interrupted, tmp_path) -> None:
    job = shutil.copytree(interrupted, tmp_path / "job")
    assert (job / "train.log").read_text().count("device cpu") == 1
    proc = run_script("train.py", *SMALL, f"hydra.run.dir={job}", "overwrite=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (job / "train.log").read_text()
    assert log.count("device cpu") == 1 and log.count("done:") == 1 and "SIGTERM received" not in log, log


def test_a_single_run_and_a_sweep_never_share_a_dir(interrupted, tmp_path) -> None:
    job = shutil.copytree(interrupted, tmp_path / "job")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("seed: 7\n")  # what a sweep writes first
    before = {job: _tree(job), sweep: _tree(sweep)}
    cases = {
        (
            "-m",
            f"hydra.sweep.dir={job}",
            "optimizer.lr=0.1,0.2",
        ): f"hydra.sweep.dir={job} holds a single run (.hydra, checkpoints",
        (
            "-m",
            f"hydra.sweep.dir={job}",
            "optimizer.lr=0.1,0.2",
            "resume=auto",
        ): "a sweep never writes into a run's dir",
        (f"hydra.run.dir={sweep}",): f"hydra.run.dir={sweep} is a sweep dir (multirun.yaml)",
        (f"hydra.run.dir={sweep}", "resume=auto"): "a single run never writes into a sweep",
    }
    for overrides, message in cases.items():
        proc = run_script("train.py", *overrides, *SMALL, cwd=tmp_path)  # -m first: Hydra's own argument
        assert proc.returncode == 1 and message in _last_line(proc), (overrides, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and {d: _tree(d) for d in before} == before, overrides


def test_an_attempt_that_fails_after_it_trained_keeps_its_log_and_config(interrupted, tmp_path) -> None:
    """Only a refusal is undone: an attempt continued in place that trained and then failed wrote records (metrics,
    summary.json with the error), so its log lines and its `.hydra/attempt-<n>/` stay for the user to read."""
    job = shutil.copytree(interrupted, tmp_path / "job")
    log_before = (job / "train.log").read_text()
    crash = "+callbacks.crash_once={}"  # fails after its first validation
    proc = run_script("train.py", *SMALL, "resume=auto", crash, f"hydra.run.dir={job}", env=plugins_env())
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == "RuntimeError: injected failure of the first attempt"
    log = (job / "train.log").read_text()
    assert log.startswith(log_before) and "continuing the run in" in log[len(log_before) :]
    assert "resume=auto" in (job / ".hydra" / "attempt-2" / "overrides.yaml").read_text()
