"""Runs that are stopped, rerun or fed broken files: the real script in a subprocess, as a cluster treats it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from helpers import PYTHON, REPO, plugins_env, run_script, script_env
from lab.stopping import STOP_SIGNALS
from warm_python import run_python

SMALL = ["model=mlp", "logger=none", "trainer.log_every_n_steps=1"]


def _start(
    run_dir: Path, *overrides: str, own_session: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """The training script; `own_session`: as a job of its own (its pid the process group and session id, as a
    shell or SLURM starts it), so that the whole job can be signalled and its processes found."""
    return subprocess.Popen(
        [PYTHON, str(REPO / "scripts" / "train.py"), f"hydra.run.dir={run_dir}", *SMALL, *overrides],
        cwd=REPO,
        env=env or script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_session,
    )


def _wait_for_steps(run_dir: Path, proc: subprocess.Popen, steps: int, limit_s: float = 300) -> None:
    """Until metrics.jsonl holds `steps` train lines: the run is inside its step loop."""
    deadline = time.monotonic() + limit_s
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.is_file() and metrics.read_text().count("train/loss") >= steps:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never reached step {steps}: {proc.poll()=}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_stop_signal_saves_last_pt_records_interrupted_and_exits_128_plus_signal(tmp_path: Path, signum) -> None:
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "trainer.max_epochs=50")
    _wait_for_steps(run_dir, proc, 3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)  # a hang must end: the bound is the feature here
    assert proc.returncode == 128 + signum, err[-3000:]
    last_line = err.strip().splitlines()[-1]
    assert last_line.startswith(f"interrupted by {signum.name} after optimizer step "), err[-3000:]
    assert "Traceback" not in err
    step = int(last_line.split("optimizer step ")[1].split(";")[0])
    saved = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert saved["progress"]["global_step"] == step >= 3
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_resume_auto_continues_the_interrupted_run_in_its_own_dir(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = runs / "first"
    proc = _start(first, "trainer.max_epochs=3", "logger=wandb")
    _wait_for_steps(first, proc, 3)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert code == 143, err[-2000:]
    stopped_at = torch.load(first / "checkpoints" / "last.pt", weights_only=True)["progress"]["global_step"]
    wandb_id = json.loads((first / "summary.json").read_text())["wandb_id"]

    second = runs / "second"  # the fresh dir Hydra makes for the new start: given up for the run it continues
    code, err = _finish(_start(second, "trainer.max_epochs=3", "logger=wandb", "resume=auto"))
    assert code == 0, err[-3000:]
    assert not second.exists() and sorted(p.name for p in runs.iterdir()) == ["first"]
    summary = json.loads((first / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == 3 * 19 and "test/acc" in summary
    assert summary["wandb_id"] == wandb_id  # the same wandb run, continued
    steps = [json.loads(line)["step"] for line in (first / "metrics.jsonl").read_text().splitlines()]
    train_steps = [s for s in steps if s is not None]
    assert max(train_steps) == 3 * 19 and stopped_at in train_steps  # one metrics file across both starts
    assert "continuing the run in" in (first / "train.log").read_text()


def test_a_rerun_into_a_used_dir_is_refused_and_keeps_its_checkpoints(train, tmp_path: Path) -> None:
    done = train(*SMALL, "trainer.max_epochs=1", run_dir=tmp_path / "done")
    best = (done.dir / "checkpoints" / "best.pt").read_bytes()
    again = train(*SMALL, "trainer.max_epochs=1", run_dir=done.dir, check=False)
    assert again.proc.returncode == 1
    assert again.proc.stderr.strip().splitlines()[-1].startswith(f"error: {done.dir} holds another run (")
    assert (done.dir / "checkpoints" / "best.pt").read_bytes() == best
    finished = train(*SMALL, "trainer.max_epochs=1", f"resume={done.dir}", check=False)
    assert "has finished training (epoch 1 of trainer.max_epochs=1" in finished.proc.stderr
    assert train(*SMALL, "trainer.max_epochs=1", "overwrite=true", run_dir=done.dir).proc.returncode == 0


def test_two_processes_never_write_one_run_dir(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    first = _start(shared, "trainer.max_epochs=50")
    _wait_for_steps(shared, first, 1)
    code, err = _finish(_start(shared, "trainer.max_epochs=1", "overwrite=true"))
    first.send_signal(signal.SIGTERM)
    _finish(first)
    assert code == 1 and f"error: {shared} is in use by a running job (pid {first.pid})" in err


@pytest.mark.parametrize("target", ["group", "launcher", "rank"])
@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_stop_signal_to_any_process_of_a_ddp_job_saves_once_and_ends_them_all(tmp_path: Path, signum, target) -> None:
    """The whole job (a terminal's Ctrl-C, scancel), the launcher alone (`#SBATCH --signal=B:USR1@120`: the batch
    shell's process) or one rank: every rank saves at one step, and no process of the job outlives it (the
    forkserver, the resource tracker and the ranks kept running, and training, after a SIGUSR1 to the launcher)."""
    run_dir = tmp_path / "ddp"
    proc = _start(run_dir, "dist=ddp", "dist.nproc=2", "trainer.max_epochs=50", own_session=True)
    try:
        _wait_for_steps(run_dir, proc, 2)
        if target == "group":
            os.killpg(proc.pid, signum)
        elif target == "launcher":
            proc.send_signal(signum)
        else:
            os.kill(_rank_pid(proc.pid, 1), signum)
        code, err = _finish(proc)
        left = _processes_of_session(proc.pid)
    finally:
        _kill_session(proc.pid)
    assert code == 128 + signum, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"interrupted by {signum.name}: every rank finished its optimizer")
    assert "Traceback" not in err, err[-3000:]
    assert left == []
    saved = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert saved["progress"]["global_step"] >= 2 and len(saved["rng"]["per_rank"]) == 2
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert (run_dir / "train.log").read_text().count("received: stopping after this optimizer step") == 1
    assert not (run_dir / ".lock").exists()


def test_a_stop_signal_to_a_ddp_job_setting_up_stops_every_rank_at_once(tmp_path: Path) -> None:
    """Before training there is no step to finish and nothing to save: the job ends at once, saying so (the
    launcher said every rank had saved last.pt)."""
    run_dir = tmp_path / "ddp"
    stop = "+callbacks.stop_job={}"  # rank 0 signals the job while it builds its callbacks
    proc = _start(run_dir, "dist=ddp", "dist.nproc=2", stop, own_session=True, env=plugins_env())
    try:
        code, err = _finish(proc)
        left = _processes_of_session(proc.pid)
    finally:
        _kill_session(proc.pid)
    assert code == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == "interrupted by SIGTERM; stopped at once, nothing more was saved"
    assert "Traceback" not in err, err[-3000:]
    assert left == []
    assert not (run_dir / "checkpoints" / "last.pt").exists() and not (run_dir / ".lock").exists()


def _processes_of_session(session: int, limit_s: float = 30) -> list[int]:
    """The live processes of the session `session` (zombies are dead), once none is left or after `limit_s`: the
    forkserver and the resource tracker end when they notice the launcher's end, a moment after it."""
    deadline = time.monotonic() + limit_s
    while True:
        live = []
        for proc in Path("/proc").iterdir():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # not a process, or gone
            if fields[0] != "Z" and int(fields[3]) == session:
                live.append(int(proc.name))
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.1)


def _kill_session(session: int) -> None:
    """Whatever a failed test left of the job it started."""
    for pid in _processes_of_session(session, limit_s=0):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _rank_pid(launcher: int, rank: int, limit_s: float = 120) -> int:
    """The pid of a spawned rank: the launcher's forkserver (lab.distributed.spawning) forks the workers one after
    the other in rank order, so the rank-th lowest pid among its children."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        parents = {}  # pid -> parent pid
        for proc in Path("/proc").iterdir():
            try:
                parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # not a process, or gone
        servers = [pid for pid, ppid in parents.items() if ppid == launcher and _is_forkserver(pid)]
        workers = sorted(pid for pid, ppid in parents.items() if ppid in servers)
        if len(workers) > rank:
            return workers[rank]
        time.sleep(0.1)
    raise AssertionError(f"no rank {rank} under pid {launcher}")


def _is_forkserver(pid: int) -> bool:
    try:
        return b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_a_stopped_rank_ends_the_job_within_the_timeout_naming_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "hang"
    proc = _start(run_dir, "dist=ddp", "dist.nproc=2", "dist.timeout_s=8", "dist.grace_s=1", "trainer.max_epochs=50")
    _wait_for_steps(run_dir, proc, 2)
    rank1 = _rank_pid(proc.pid, 1)
    os.kill(rank1, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        code, err = _finish(proc)  # a hang must end: communicate's limit is the bound
    finally:
        os.kill(rank1, signal.SIGKILL) if Path(f"/proc/{rank1}").exists() else None
    elapsed = time.monotonic() - stopped
    assert code == 1 and err.strip().splitlines()[-1].startswith("error: rank 1 stopped responding"), err[-3000:]
    # dist.timeout_s + dist.grace_s and the launcher's report: 10-15 s here; 90 leaves room for a loaded machine
    assert elapsed < 90


def test_max_restarts_restarts_the_workers_from_last_pt(tmp_path: Path) -> None:
    run_dir = tmp_path / "restart"
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests" / "integration" / "plugins")
    crash = "+callbacks.crash_once={}"  # the first attempt fails after its validation
    args = [*SMALL, "dist=ddp", "dist.nproc=2", "dist.max_restarts=1", "trainer.max_epochs=2"]
    args += ["trainer.ckpt_every_n_steps=4", crash, f"hydra.run.dir={run_dir}"]
    proc = run_python([str(REPO / "scripts" / "train.py"), *args], cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "restarting the workers (restart 1 of dist.max_restarts=1)" in log
    assert "resumed at epoch 1, step 8" in log  # the first attempt's last mid-epoch checkpoint (9 steps per epoch)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


# A DataLoader worker killed from outside (the kernel's OOM killer, kill -9) as it starts reading the 12th batch.
KILL_A_WORKER = """
import os, signal, torch
import lab.data.loaders as _loaders
_stream_seed = _loaders.stream_seed
def _killed_at_batch_12(tag, position):
    if torch.utils.data.get_worker_info() is not None and position >= 11 * 64:
        os.kill(os.getpid(), signal.SIGKILL)
    return _stream_seed(tag, position)
_loaders.stream_seed = _killed_at_batch_12
"""


def test_a_killed_loader_worker_ends_in_one_line_and_the_resume_it_names_is_exact(tmp_path: Path) -> None:
    args = [*SMALL, "data.num_workers=1", "trainer.max_epochs=1", "trainer.ckpt_every_n_steps=1"]
    killed = tmp_path / "killed"
    proc = run_script("train.py", *args, f"hydra.run.dir={killed}", patch=KILL_A_WORKER)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: a DataLoader worker process died ("), line  # found by the loader, or by its pipe
    assert line.endswith(f"resume: the same command with resume={killed}"), line
    assert json.loads((killed / "summary.json").read_text())["status"] == "failed"
    saved = torch.load(killed / "checkpoints" / "last.pt", weights_only=True)["progress"]["global_step"]
    assert 1 <= saved < 12

    resumed = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'again'}", f"resume={killed}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    ends = [torch.load(d / "checkpoints" / "last.pt", weights_only=True) for d in (killed, tmp_path / "whole")]
    assert ends[0]["progress"]["global_step"] == ends[1]["progress"]["global_step"] == 19
    assert all(torch.equal(ends[0]["model"][k], ends[1]["model"][k]) for k in ends[1]["model"])


def test_ctrl_c_while_the_tracker_process_starts_is_one_line(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches its whole process group: the tracker's child process (logger=wandb), still
    importing, printed its own KeyboardInterrupt traceback beside the run's one line."""
    run_dir = tmp_path / "run"
    proc = _start(run_dir, "logger=wandb", "trainer.max_epochs=50", own_session=True)
    try:
        child = _wait_for_process(proc, "lab.tracking.child_process")
        while child is not None and not _catches(child, signal.SIGINT) and proc.poll() is None:
            time.sleep(0.005)  # until its Python runs (it handles SIGINT): it is importing, for about a second
        os.killpg(proc.pid, signal.SIGINT)
        code, err = _finish(proc)
    finally:
        _kill_session(proc.pid)
    assert child is not None, err[-3000:]
    assert code == 130, err[-3000:]
    assert "KeyboardInterrupt" not in err and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("interrupted by ")


def _wait_for_process(proc: subprocess.Popen, command: str, limit_s: float = 300) -> int | None:
    """The pid of the first process of `proc`'s session whose command line holds `command`, as soon as it runs."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        for pid in _processes_of_session(proc.pid, limit_s=0):
            with contextlib.suppress(OSError):
                if command.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        time.sleep(0.005)
    return None


def _catches(pid: int, signum: int) -> bool:
    """Whether the process `pid` has a handler of its own for `signum` (Python installs one for SIGINT)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone: nothing to wait for
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signum - 1) & 1)


STOP_DURING = """
import importlib, os, signal, time

module = importlib.import_module("{module}")

def stop(*args, **kwargs):
    os.kill(os.getpid(), signal.{signal})  # the stop signal arrives while the run sets up
    time.sleep(60)

setattr(module, "{function}", stop)
"""


@pytest.mark.parametrize(
    ("script", "where", "signum"),
    [
        ("train.py", "lab.workflows.train.build_data", signal.SIGTERM),  # before the trackers start
        ("train.py", "lab.workflows.train.build_data", signal.SIGUSR1),
        ("train.py", "lab.workflows.train.build_data", signal.SIGUSR2),
        ("train.py", "lab.training.start.log_start", signal.SIGTERM),  # trackers started, before training
        ("export.py", "lab.workflows.restore.rebuild", signal.SIGTERM),
    ],
)
def test_a_stop_signal_during_setup_is_one_line_and_releases_the_run_dir(
    finished_run: Path, tmp_path: Path, script: str, where: str, signum
) -> None:
    """Where no optimizer step is in flight a stop signal stops at once, as Ctrl-C does: 128 + the signal, one
    line, the lock released, a started tracker's summary "interrupted" (it exited 143 silently, leaving .lock)."""
    run_dir = tmp_path / "run"
    module, function = where.rsplit(".", 1)
    patch = STOP_DURING.format(module=module, function=function, signal=signum.name)
    overrides = ["model=mlp"] if script == "train.py" else [f"ckpt_path={finished_run}/checkpoints/best.pt"]
    proc = run_script(script, *overrides, "logger=none", f"hydra.run.dir={run_dir}", patch=patch, timeout=120)
    assert proc.returncode == 128 + signum, proc.stderr[-3000:]
    assert (
        proc.stderr.strip().splitlines()[-1] == f"interrupted by {signum.name}; stopped at once, nothing more was saved"
    )
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (run_dir / ".lock").exists()
    if (run_dir / "summary.json").exists():
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    else:  # nothing of the run's own was written: what Hydra wrote for it is gone too
        assert not run_dir.exists()
    if where.endswith("log_start"):
        assert (run_dir / "summary.json").exists()


def test_the_loss_logged_after_a_resume_mid_window_is_the_uninterrupted_runs(tmp_path: Path) -> None:
    """Stopped at step 25 (saved there), resumed: the line at step 30 averages steps 21-30 as the uninterrupted
    run's does, not 26-30 only (the weights were identical, the logged curve was not)."""
    recipe = [*SMALL, "trainer.max_epochs=2", "trainer.log_every_n_steps=10"]
    one_go = run_script("train.py", *recipe, f"hydra.run.dir={tmp_path / 'one-go'}")
    assert one_go.returncode == 0, one_go.stderr[-3000:]
    run_dir = tmp_path / "stopped"
    stop = "+callbacks.kill_at_step={step:25,signal:SIGTERM}"
    stopped = run_script("train.py", *recipe, stop, f"hydra.run.dir={run_dir}", env=plugins_env())
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    resumed = run_script("train.py", *recipe, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def losses(run: Path) -> dict[int, float]:
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return {line["step"]: line["train/loss"] for line in lines if "train/loss" in line}

    expected = losses(tmp_path / "one-go")
    assert 30 in expected and losses(run_dir) == pytest.approx(expected, rel=1e-6)
