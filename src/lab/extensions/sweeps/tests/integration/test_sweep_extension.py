"""The extension through the real CLI: Optuna searches (a study resumed, bad trials pruned, two drivers on one study),
the joblib launcher (jobs in parallel processes, a killed worker failing its own job only), the page's commands, and
the refusals of a core-only install."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from helpers import REPO, plugins_env, script_env
from lab.extensions.sweeps.study_storage import open_storage
from sweep_runs import QUICK, assert_ok, run_sweep, summary_rows, sweep_job

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README.md"
PLUGINS = Path(__file__).resolve().parent / "plugins"  # this folder's test callbacks (kill_driver)

# the page's ```sh commands, as written (test_readme checks that each line of them is quoted here)
SEARCH = "python scripts/train.py hparams_search=optuna"
OWN_SPACE = "python scripts/train.py hparams_search=optuna model=mlp 'optimizer.lr=tag(log,interval(1e-4,1e-1))'"
JOBLIB = "python scripts/train.py -m hydra/launcher=joblib hydra.launcher.n_jobs=2 seed=1,2"
SLURM = "python scripts/train.py -m hydra/launcher=slurm hydra.launcher.partition=gpu optimizer.lr=1e-3,3e-3"
SBATCH = "sbatch --array=0-3 --gres=gpu:1 --time=24:00:00 --wrap 'python scripts/train.py hparams_search=optuna hydra.sweeper.storage=journal:///outputs/train/optuna/shared.log hydra.sweeper.n_trials=40 hydra.sweeper.sampler.seed=$SLURM_ARRAY_TASK_ID hydra.sweep.dir=outputs/train/optuna/$SLURM_ARRAY_JOB_ID-$SLURM_ARRAY_TASK_ID'"  # noqa: E501


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _killing_env(job: int, signal_name: str) -> dict:
    return {**plugins_env(), "KILL_JOB": str(job), "KILL_SIGNAL": signal_name}  # tests/integration/plugins/kill_job.py


def _page_args(command: str) -> list[str]:
    """A command of the page, checked to be there as written: its arguments after `python scripts/train.py`."""
    assert command in PAGE.read_text(), command
    python, script, *args = shlex.split(command)
    assert (python, script) == ("python", "scripts/train.py"), command
    return args


# --------------------------------------------------------------------------- the page's commands
@pytest.mark.parametrize("command", [SEARCH, OWN_SPACE], ids=["search", "own space"])
def test_the_pages_searches_run(command, tmp_path):
    """Shortened as test_readme shortens the README's commands, with a study of their own (not the one under
    outputs/) and two trials."""
    search = [f"hydra.sweeper.storage=sqlite:///{tmp_path}/optuna.db", "hydra.sweeper.n_trials=2"]
    assert_ok(run_sweep(tmp_path, *_page_args(command), "debug=fast", "logger=none", *search, multirun=False))
    jobs = [json.loads(path.read_text()) for path in tmp_path.glob("[0-9]*/summary.json")]
    assert len(jobs) == 2 and {job["status"] for job in jobs} == {"completed"}, command


def test_joblib_runs_jobs_in_parallel_processes(tmp_path):
    sweep = tmp_path / "joblib"
    multirun, *args = _page_args(JOBLIB)  # the page's command as written, shortened as test_readme shortens one
    assert multirun == "-m" and "seed=1,2" in args
    # with DataLoader workers: a loky process passes on its own start method, which once failed to start them
    assert_ok(run_sweep(sweep, *args, *QUICK, "logger=none", "data.num_workers=1"))
    jobs = [sweep_job(sweep, n, "sweep_job.json") for n in (0, 1)]
    assert jobs[0]["pid"] != jobs[1]["pid"]
    assert jobs[0]["start"] < jobs[1]["end"] and jobs[1]["start"] < jobs[0]["end"]  # they overlapped
    assert [row["status"] for row in summary_rows(sweep)] == ["completed"] * 2


def _python(*args: str) -> subprocess.CompletedProcess:
    """`python <args>` from the repository root, as a user runs it; its output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=60
    )


def test_the_slurm_command_composes():
    """It needs a SLURM cluster: its config is composed here (the launcher's requeue is tested with a fake submitit
    in test_sweep_plugins.py, LabSlurmLauncher)."""
    args = [a for a in _page_args(SLURM) if a != "-m" and "," not in a]  # one job's config, nothing submitted
    proc = _python("scripts/train.py", *args, "--cfg", "hydra")
    assert proc.returncode == 0 and "partition: gpu" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "_target_: hydra_plugins.lab_sweepers.extensions.LabSlurmLauncher" in proc.stdout


def test_the_sbatch_array_of_optuna_drivers_composes():
    """It needs a SLURM cluster: one driver's config is composed here; two drivers on one study, one of them killed,
    run below (test_two_optuna_drivers_share_a_study...: hydra.sweeper.heartbeat_interval)."""
    assert SBATCH in PAGE.read_text()
    wrapped = shlex.split(SBATCH)[-1]  # --wrap's command, as array task 2 of job 7 runs it
    for name, value in {"SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "2"}.items():
        wrapped = wrapped.replace(f"${name}", value)
    python, *args = shlex.split(wrapped)
    proc = _python(*args, "--cfg", "hydra")
    assert python == "python" and proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for line in ("storage: journal:///outputs/train/optuna/shared.log", "dir: outputs/train/optuna/7-2", "seed: 2\n"):
        assert line in proc.stdout, line


# --------------------------------------------------------------------------- Optuna
def test_optuna_study_resumes_to_n_trials_and_prunes_bad_trials(tmp_path):
    storage = f"sqlite:///{tmp_path}/study.db"
    search = [
        "hparams_search=optuna",  # sets hydra.mode=MULTIRUN: no -m
        *QUICK,
        "logger=none",
        "trainer.max_epochs=3",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=resume-test",
        "hydra.sweeper.sampler.seed=10",  # draws 0.03, 1e-8, 0.03, 1e-8: a good trial completes first
        "hydra.sweeper.pruner.n_startup_trials=1",
        "hydra.sweeper.pruner.n_warmup_steps=0",
        # the command line replaces the example space: one clearly useless learning rate, the rest fixed
        "optimizer.lr=choice(0.03,1e-8)",
        "optimizer.weight_decay=0.0",
        "data.batch_size=64",
    ]
    first = run_sweep(tmp_path / "first", *search, "hydra.sweeper.n_trials=4", multirun=False)
    assert_ok(first)
    study = optuna.load_study(study_name="resume-test", storage=storage)
    before = [(t.number, t.state, t.params) for t in study.trials]
    assert len(before) == 4

    second = run_sweep(tmp_path / "second", *search, "hydra.sweeper.n_trials=6", multirun=False)
    assert_ok(second)
    trials = optuna.load_study(study_name="resume-test", storage=storage).trials
    assert [(t.number, t.state, t.params) for t in trials[:4]] == before  # the same study, continued
    assert [t.number for t in trials] == list(range(6))
    assert sorted(p.name for p in (tmp_path / "second").iterdir() if p.is_dir()) == ["4", "5"]  # job = trial number

    states = {t.state for t in trials}
    assert TrialState.COMPLETE in states and TrialState.PRUNED in states
    for trial in trials:
        assert trial.user_attrs["run_dir"].endswith(f"/{trial.number}")
        if trial.state == TrialState.PRUNED:  # only the useless learning rate falls below the median
            assert trial.params["optimizer.lr"] == 1e-8
            run_dir = Path(trial.user_attrs["run_dir"])
            assert json.loads((run_dir / "summary.json").read_text())["status"] == "pruned"
        if trial.state == TrialState.COMPLETE:
            assert (
                trial.value
                == json.loads((Path(trial.user_attrs["run_dir"]) / "summary.json").read_text())["val/acc_best"]
            )
    rows = summary_rows(tmp_path / "second")
    assert {row["job"] for row in rows} == {"4", "5"}


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_two_optuna_drivers_share_a_study_and_a_killed_drivers_trial_is_run_again(tmp_path, kind):
    """Two driver processes on one study: a sqlite file, or a journal file (the file-system backend for nodes that
    share a file system, whose heartbeat is the sweeper's own trial attribute)."""
    storage = f"sqlite:///{tmp_path}/study.db" if kind == "sqlite" else f"journal:///{tmp_path}/study.log"
    search = [
        "hparams_search=optuna",
        *QUICK,
        "logger=none",
        "trainer.max_epochs=1",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=drivers",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.pruner=null",
        "hydra.sweeper.heartbeat_interval=1",
        "hydra.sweeper.grace_period=3",  # a dead driver's trial is retried 3 s after its last heartbeat
        "optimizer.lr=tag(log,interval(1e-3,1e-1))",
    ]
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(PLUGINS)

    def start(name: str, seed: int, *extra: str, **more_env: str) -> subprocess.Popen:
        args = [f"hydra.sweep.dir={tmp_path / name}", f"hydra.sweeper.sampler.seed={seed}", *search, *extra]
        command = [sys.executable, str(REPO / "scripts/train.py"), *args]
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (a file, not a pipe: neither driver blocks on it)
        return subprocess.Popen(command, cwd=REPO, env={**env, **more_env}, stdout=log, stderr=subprocess.STDOUT)

    # driver a completes one trial, then dies (SIGKILL) in its second, which it leaves RUNNING; b runs the rest.
    # b starts once a runs its first trial, so that a surely gets two (the creation race is test_optuna_drivers')
    a = start("a", 1, "+callbacks.kill_driver={}", KILL_AFTER_TRIALS="1")
    while not (tmp_path / "a" / "0").is_dir() and a.poll() is None:
        time.sleep(0.1)
    b = start("b", 2)
    assert a.wait(timeout=300) == -9, (tmp_path / "a.log").read_text()[-3000:]
    assert b.wait(timeout=300) == 0, (tmp_path / "b.log").read_text()[-3000:]

    trials = optuna.load_study(study_name="drivers", storage=open_storage(storage)).trials
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    (killed,) = [t for t in trials if t.state == TrialState.FAIL]
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(done) == 4 and len(trials) == 5  # n_trials in all: none lost, none doubled, none beyond
    assert retry in done and retry.params == killed.params
    assert (tmp_path / "a" / str(killed.number)).is_dir()
    run_dirs = [Path(t.user_attrs["run_dir"]) for t in done]
    assert [d.name for d in run_dirs] == [str(t.number) for t in done]  # job = trial number, in its driver's dir
    assert sorted(d.parent.name for d in run_dirs) == ["a", "b", "b", "b"]  # both drivers ran the study's trials
    assert f"trial {killed.number}: its driver stopped" in (tmp_path / "b.log").read_text()


# --------------------------------------------------------------------------- joblib
def test_a_killed_joblib_worker_fails_its_own_job_and_resume_auto_runs_only_that_one(tmp_path):
    sweep = tmp_path / "joblib"
    command = [*QUICK, "logger=none", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2,3"]
    command.append("+callbacks.kill_job={}")  # job 1 SIGKILLs itself, as an OOM kill does
    proc = run_sweep(sweep, *command, env=_killing_env(1, "KILL"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: 1 of 3 sweep jobs failed (#1 JobKilled: worker process killed by SIGKILL (out of memory?)); "
        f"overrides and logs: {sweep}/sweep_summary.md"
    )
    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert [rows[j]["status"] for j in "012"] == ["completed", "failed", "completed"]  # the others went on
    assert rows["1"]["error"] == "JobKilled: worker process killed by SIGKILL (out of memory?)"
    finished = {job: _files(sweep / job) for job in "02"}

    # the same command again would write over the finished jobs: refused in one line, nothing written
    before = _files(sweep)
    again = run_sweep(sweep, *command, env=_killing_env(-1, "KILL"))
    assert again.returncode == 1 and again.stderr.strip() == (
        f"error: {sweep} holds an earlier sweep (3 job dirs); a sweep never writes over another: leave "
        "hydra.sweep.dir unset (every sweep gets its own), pick another dir, or add resume=auto to continue that "
        "sweep (the same command: its completed jobs are kept)"
    )
    assert _files(sweep) == before

    # resume=auto runs the failed job again in its own dir; the completed ones are kept as they are
    resumed = run_sweep(sweep, *command, "resume=auto", env=_killing_env(-1, "KILL"))
    assert_ok(resumed)
    assert {job: _files(sweep / job) for job in "02"} == finished
    rows = {row["job"]: row for row in summary_rows(sweep)}
    assert sorted(rows) == ["0", "1", "2"] and {row["status"] for row in rows.values()} == {"completed"}
    assert rows["1"]["run_dir"] == str(sweep / "1") and "seed=2" in rows["1"]["overrides"]
    assert sweep_job(sweep, 1)["status"] == "completed" and not (sweep / ".lock").exists()


# --------------------------------------------------------------------------- a core-only install
# a sweeper's setup, a launcher whose plugin is missing: refused before anything is written, naming the extra
@pytest.mark.parametrize(
    ("args", "extra"),
    [(["-m", "hparams_search=optuna"], "sweeps"), (["-m", "hydra/launcher=slurm", "seed=1,2"], "slurm")],
    ids=["sweeps", "slurm"],
)
def test_an_option_of_a_missing_extra_is_refused_before_any_write(core_python, tmp_path, args, extra) -> None:
    dirs = [f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"]
    command = [str(core_python), str(REPO / "scripts" / "train.py"), *args, *dirs]
    env = script_env() | {"WANDB_MODE": "offline"}
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert f"make install EXTRAS={extra}" in line and f"-e '.[{extra}]'" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir, no sweep dir
