"""`hydra/launcher=ray` through the real CLI on a local Ray instance: jobs in parallel Ray workers, a killed job
failing alone and `resume=auto` running only it, a stop signal saving the running jobs, and the page's cluster
commands (composed: they need several machines)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import REPO, plugins_env, script_env
from sweep_runs import QUICK, assert_ok, run_sweep, summary_rows, sweep_job

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README.md"

# the page's ```sh commands, as written (test_readme checks that each line of them is quoted here)
LOCAL = "python scripts/train.py -m hydra/launcher=ray hydra.launcher.local_cpus=2 seed=1,2"
HEAD = "ray start --head --port=6379"
WORKER = "ray start --address=<head>:6379"
CLUSTER = "python scripts/train.py -m hydra/launcher=ray hydra.launcher.address=auto hydra.launcher.num_gpus=1 optimizer.lr=1e-3,3e-3,1e-2"  # noqa: E501


def _page_args(command: str) -> list[str]:
    """A command of the page, checked to be there as written: its arguments after `python scripts/train.py`."""
    assert command in PAGE.read_text(), command
    python, script, *args = shlex.split(command)
    assert (python, script) == ("python", "scripts/train.py"), command
    return args


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killing_env(job: int) -> dict:
    return {**plugins_env(), "KILL_JOB": str(job), "KILL_SIGNAL": "KILL"}  # tests/integration/plugins/kill_job.py


def test_a_killed_ray_job_fails_alone_and_resume_auto_runs_only_that_one(tmp_path):
    sweep = tmp_path / "ray"
    multirun, *args = _page_args(LOCAL)  # the page's command, shortened as test_readme shortens one
    assert multirun == "-m" and "seed=1,2" in args
    command = [*args, *QUICK, "logger=none", "+callbacks.kill_job={}"]  # job 1 SIGKILLs itself, as an OOM kill does
    proc = run_sweep(sweep, *command, env=_killing_env(1))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    killed = "JobKilled: its Ray worker died (WorkerCrashedError: killed, or out of memory?)"
    # Ray relays the workers' output as it comes, so lines of theirs may follow this one
    assert f"error: 1 of 2 sweep jobs failed (#1 {killed}); overrides and logs: {sweep}/sweep_summary.md" in (
        proc.stderr.splitlines()
    ), proc.stderr[-3000:]
    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert [rows[j]["status"] for j in "01"] == ["completed", "failed"] and rows["1"]["error"] == killed
    jobs = [sweep_job(sweep, n, "sweep_job.json") for n in (0, 1)]
    assert jobs[0]["pid"] is not None and jobs[1]["pid"] is None  # job 0 recorded its worker; the launcher job 1
    assert jobs[0]["start"] < jobs[1]["end"] and jobs[1]["start"] < jobs[0]["end"]  # they ran at once (2 CPUs)
    assert (sweep / "1" / ".hydra").is_dir() and not (sweep / "1" / "summary.json").exists()  # killed mid-run
    finished = _files(sweep / "0")

    # resume=auto runs the failed job again in its own dir; the completed one is kept as it is
    resumed = run_sweep(sweep, *command, "resume=auto", env=_killing_env(-1))
    assert_ok(resumed)
    said = resumed.stdout + resumed.stderr
    assert "resume=auto: job #0 completed earlier" in said and "\t#0 : " not in said and "\t#1 : " in said
    assert _files(sweep / "0") == finished
    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert sorted(rows) == ["0", "1"] and {row["status"] for row in rows.values()} == {"completed"}
    assert rows["1"]["run_dir"] == str(sweep / "1") and "seed=2" in rows["1"]["overrides"]
    assert sweep_job(sweep, 1)["status"] == "completed" and not (sweep / ".lock").exists()


def test_a_stop_signal_saves_the_running_ray_jobs_and_starts_no_other(tmp_path):
    """Jobs 0 and 1 run (2 CPUs), job 2 waits for a CPU; SIGTERM to the sweep once both have validated."""
    sweep = tmp_path / "ray"
    args = ["-m", f"hydra.sweep.dir={sweep}", "hydra/launcher=ray", "hydra.launcher.local_cpus=2", *QUICK]
    args += ["logger=none", "trainer.max_epochs=100000", "seed=1,2,3"]  # they run until stopped
    log = tmp_path / "sweep.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "scripts/train.py"), *args], cwd=REPO, env=script_env(), stdout=out, stderr=out
        )
        metrics = [sweep / str(n) / "metrics.jsonl" for n in (0, 1)]
        while proc.poll() is None and not all(m.is_file() and "val/" in m.read_text() for m in metrics):
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    for n in (0, 1):
        record = sweep_job(sweep, n, "sweep_job.json")
        assert record["status"] == "interrupted", record
        assert (sweep / str(n) / "checkpoints" / "last.pt").is_file()
    assert not (sweep / "2").exists()  # never started
    text = log.read_text()
    assert "SIGTERM: 1 jobs not run (#2)" in text and f"hydra.sweep.dir={sweep.absolute()} resume=auto" in text


def test_the_cluster_commands_compose():
    """`ray start` takes the page's flags, and the sweep's config is the page's; running them needs a cluster."""
    ray = str(Path(sys.executable).with_name("ray"))
    for line in (HEAD, WORKER):
        assert line in PAGE.read_text(), line
    usage = subprocess.run([ray, "start", "--help"], capture_output=True, text=True, timeout=120).stdout
    assert "--head" in usage and "--port" in usage and "--address" in usage
    args = [a for a in _page_args(CLUSTER) if a != "-m" and "," not in a]  # one job's config, nothing started
    proc = subprocess.run(
        [sys.executable, "scripts/train.py", *args, "--cfg", "hydra"],
        cwd=REPO,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for line in ("_target_: hydra_plugins.lab_sweepers.extensions.RayLauncher", "address: auto", "num_gpus: 1"):
        assert line in proc.stdout, proc.stdout[-2000:]


def test_fail_fast_launches_batches_as_wide_as_the_ray_instance(tmp_path):
    """2 CPUs, 1 per job: jobs 0 and 1 run together, job 0 fails, and job 2 is not launched."""
    sweep = tmp_path / "fast"
    args = ["hydra/launcher=ray", "hydra.launcher.local_cpus=2", *QUICK, "logger=none", "sweep.fail_fast=true"]
    proc = run_sweep(sweep, *args, "data.batch_size=0,64,32")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "sweep.fail_fast: job #0 failed; not launching the 1 remaining jobs" in proc.stdout + proc.stderr
    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert sorted(rows) == ["0", "1"] and not (sweep / "2").exists()
    assert rows["0"]["error"].startswith("ConfigError: data.batch_size") and rows["1"]["status"] == "completed"


def test_a_share_larger_than_the_local_instance_is_refused_before_any_write(tmp_path):
    """Ray would queue such a job forever."""
    args = ["hydra/launcher=ray", "hydra.launcher.local_cpus=2", "hydra.launcher.num_cpus=3", "seed=1,2"]
    proc = run_sweep(tmp_path / "sweep", *args)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: hydra.launcher.num_cpus=3, but the local Ray instance has 2 CPUs: lower it, or join a cluster that "
        "has them (hydra.launcher.address=auto)"
    )
    assert not (tmp_path / "sweep").exists()
