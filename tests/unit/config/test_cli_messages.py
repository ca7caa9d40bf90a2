"""The entry scripts, run as a user runs them: `--help` and tab completion offer only real options, and a config
mistake ends in one or two lines naming the key or option and the nearest valid one (HYDRA_FULL_ERROR=1: Hydra's
full report). Subprocesses, about a second each: keep these few."""

from __future__ import annotations

import re
import subprocess

import pytest

from helpers import GROUPS, PYTHON, REPO, group_options, run_script, script_env

pytestmark = pytest.mark.integration  # every test runs an entry script
MODELS = group_options("model")  # the option classes and the presets: never a hand-kept list


def _script(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(REPO / "scripts" / script), *args],
        cwd=REPO,
        env=env or script_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


# --------------------------------------------------------------------------- --help and completion
def test_help_lists_the_real_options_of_every_group_and_no_schema() -> None:
    proc = _script("train.py", "--help")
    assert proc.returncode == 0, proc.stderr
    groups = dict(re.findall(r"^(\w+): (.*)$", proc.stdout.split("== Config ==")[0], re.MULTILINE))
    optional = {group for group in ("hparams_search", "callback") if group_options(group)}  # an extension's options
    assert set(GROUPS) | {"logger"} | optional == set(groups)  # no schema group
    for group, options in groups.items():
        assert options.split(", ") == group_options(group), f"--help lists {options} for {group}"
    assert "schema" not in proc.stdout


@pytest.mark.parametrize("script", ["eval.py", "export.py", "infer.py"])
def test_help_of_the_checkpoint_scripts_lists_no_schema(script: str) -> None:
    proc = _script(script, "--help")
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"^logger: {', '.join(group_options('logger'))}$", proc.stdout, re.MULTILINE)
    assert "schema" not in proc.stdout


def _complete(line: str) -> list[str]:
    env = {**script_env(), "COMP_LINE": f"python scripts/train.py {line}"}
    proc = _script("train.py", "-sc", "query=bash", env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_tab_completion_offers_only_real_options() -> None:
    assert _complete("model=") == [f"model={m}" for m in MODELS]
    words = _complete("")
    assert "model=" in words and "scheduler=" in words and not [w for w in words if "schema" in w]


# --------------------------------------------------------------------------- mistakes in a line or two
def _mistake(*args: str, env: dict[str, str] | None = None) -> str:
    proc = _script("train.py", *args, env=env)
    assert proc.returncode != 0
    return proc.stderr


def test_a_key_added_with_plus_to_a_typed_node_is_refused(tmp_path) -> None:
    # Hydra's `+` adds a key to any node, schema or not, and OmegaConf.to_object would drop it without a word
    stderr = _mistake("+model.depth=2", f"hydra.run.dir={tmp_path}")
    lines = stderr.splitlines()
    assert len(lines) <= 2, stderr
    assert lines[0] == "error: model.depth is not a key of model=cnn"
    assert lines[1].split(": ")[1].split(", ") == [
        "name",
        "freeze",
        "init_from",
        "channels",
        "dropout",
        "grad_checkpointing",
    ]
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    ("args", "first_line", "allowed"),
    [
        (
            ["trainer.max_epoch=3"],
            "trainer.max_epoch is not a key of trainer; did you mean trainer.max_epochs?",
            "max_steps",
        ),
        (
            ["logger.wandb.mod=offline"],
            "logger.wandb.mod is not a key of logger.wandb; did you mean logger.wandb.mode?",
            "init_timeout",
        ),
        (["model=cnnn"], "model=cnnn is not an option of model; did you mean model=cnn?", ", ".join(MODELS)),
        (["scheduler=cosin"], "scheduler=cosin is not an option of scheduler; did you mean scheduler=cosine?", "step"),
        (["experimnt=digits_mlp"], "experimnt is not a key of the config; did you mean experiment?", "debug"),
        # each option has its own keys: patience is plateau's, num_samples synthetic's
        (
            ["data.num_samples=5"],
            "data.num_samples is not a key of data=digits; did you mean data.num_classes? (data=synthetic has it)",
            "num_classes",
        ),
        (
            ["scheduler=step", "scheduler.patience=3"],
            "scheduler.patience is not a key of scheduler=step (scheduler=plateau has it)",
            "gamma",
        ),
        (
            ["data.batch_size=abc"],
            "data.batch_size=abc: Value 'abc' of type 'str' could not be converted to Integer",
            "",
        ),
    ],
)
def test_an_unknown_key_option_or_type_is_one_or_two_lines(args: list[str], first_line: str, allowed: str) -> None:
    stderr = _mistake(*args, "--cfg", "job")
    lines = stderr.splitlines()
    assert 1 <= len(lines) <= 2, stderr
    assert lines[0] == f"error: {first_line}"
    assert allowed in lines[-1]


def test_a_sweep_job_with_an_unknown_option_is_refused_before_any_job_runs(tmp_path) -> None:
    stderr = _mistake("-m", "model=mlp,cnnn", f"hydra.sweep.dir={tmp_path}")
    assert stderr.splitlines()[0] == "error: model=cnnn is not an option of model; did you mean model=cnn?"
    assert not (tmp_path / "0").exists()


def test_hydra_full_error_still_shows_hydras_full_report() -> None:
    env = {**script_env(), "HYDRA_FULL_ERROR": "1"}
    stderr = _mistake("trainer.max_epoch=3", "--cfg", "job", env=env)
    assert "Traceback (most recent call last)" in stderr
    assert "ConfigCompositionException: Could not override 'trainer.max_epoch'" in stderr
    assert not stderr.startswith("error:")


def test_a_bad_value_keeps_its_one_line_and_shows_its_traceback_with_hydra_full_error(tmp_path) -> None:
    """A value check fails inside the run (lab.cli.run_workflow): its own message, or with HYDRA_FULL_ERROR=1 the
    traceback that says where it came from."""
    run_dir = f"hydra.run.dir={tmp_path}"
    expected = "error: optimizer.lr must be in (0, 100], got -1.0 (typical: 1e-5 to 1)"
    assert _mistake("optimizer.lr=-1", run_dir).splitlines() == [expected]
    full = _mistake("optimizer.lr=-1", run_dir, env={**script_env(), "HYDRA_FULL_ERROR": "1"})
    assert "Traceback (most recent call last)" in full and "ConfigError: optimizer.lr must be in (0, 100]" in full


# --------------------------------------------------------------------------- Ctrl-C before training's own handler
CTRL_C_WHILE_BUILDING_DATA = """
import os, signal, time
from lab.workflows import train

# a shell starts the script with Ctrl-C's default action; an xdist worker ignores SIGINT and its children inherit that
signal.signal(signal.SIGINT, signal.default_int_handler)

def ctrl_c(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C a few seconds in, while the data is being built
    time.sleep(60)

train.build_data = ctrl_c  # where the train workflow looks the data builder up
"""


def test_ctrl_c_before_training_started_is_one_line_and_exit_130(tmp_path) -> None:
    """A real SIGINT through scripts/train.py before training installs its handler (which saves last.pt first):
    no KeyboardInterrupt traceback, the shell's exit code for Ctrl-C."""
    run_dir = tmp_path / "run"
    args = ["model=mlp", "logger=none", f"hydra.run.dir={run_dir}"]
    proc = run_script("train.py", *args, patch=CTRL_C_WHILE_BUILDING_DATA, timeout=120)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr and "KeyboardInterrupt" not in proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "interrupted by Ctrl-C (SIGINT); stopped at once, nothing more was saved"
    assert not (run_dir / "checkpoints").exists()


def test_ctrl_c_while_hydra_composes_is_one_line_too(monkeypatch, capsys) -> None:
    from lab import cli

    def composing() -> None:
        raise KeyboardInterrupt  # Ctrl-C during Hydra's config composition, before any workflow runs

    monkeypatch.setattr("sys.argv", ["scripts/eval.py"])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as stopped:
        cli.main(composing, "eval")
    assert stopped.value.code == 130
    assert capsys.readouterr().err.splitlines() == [
        "interrupted by Ctrl-C (SIGINT); stopped at once, nothing more was saved"
    ]
