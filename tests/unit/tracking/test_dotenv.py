"""Tracker credentials from `.env`: what the loader reads, that it never overrides the environment, that it sets
only the trackers' variables, and that every entry script (through lab.cli.main) loads it before Hydra starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lab import cli, dotenv


@pytest.fixture(autouse=True)
def private_environ(monkeypatch):
    """A copy of the environment for the test to change: nothing it loads leaks into other tests."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_DOTENV_TEST_", "NO_DOTENV"))}
    monkeypatch.setattr(os, "environ", environ)
    return environ


def test_parse_reads_assignments_quotes_and_comments(capsys):
    text = "\n".join(
        [
            "# tracker credentials",
            "",
            "WANDB_API_KEY=abc123",
            "export WANDB_ENTITY = my-team  # inline comment",
            "WANDB_PROJECT='a # kept'",
            'NOTE="two\\nlines"',
            "EMPTY=",
            "URL=http://host:8080/#anchor",
            "not an assignment",
        ]
    )
    assert dotenv.parse(text, source="x.env") == {
        "WANDB_API_KEY": "abc123",
        "WANDB_ENTITY": "my-team",
        "WANDB_PROJECT": "a # kept",
        "NOTE": "two\nlines",
        "EMPTY": "",
        "URL": "http://host:8080/#anchor",
    }
    assert "x.env:9: not KEY=value, ignored" in capsys.readouterr().err


def test_the_environment_and_the_first_file_win(tmp_path, private_environ):
    private_environ["WANDB_DOTENV_TEST_SET"] = "from the shell"
    first, second = tmp_path / "first.env", tmp_path / "second.env"
    first.write_text("WANDB_DOTENV_TEST_SET=from the file\nWANDB_DOTENV_TEST_A=first\n")
    second.write_text("WANDB_DOTENV_TEST_A=second\nWANDB_DOTENV_TEST_B=second\n")
    loaded = dotenv.load_dotenv([first, tmp_path / "missing.env", second])
    assert loaded == {"WANDB_DOTENV_TEST_A": "first", "WANDB_DOTENV_TEST_B": "second"}
    assert private_environ["WANDB_DOTENV_TEST_SET"] == "from the shell"
    assert (private_environ["WANDB_DOTENV_TEST_A"], private_environ["WANDB_DOTENV_TEST_B"]) == ("first", "second")


def test_no_dotenv_skips_loading(tmp_path, private_environ):
    (tmp_path / ".env").write_text("WANDB_DOTENV_TEST_A=1\n")
    private_environ["NO_DOTENV"] = "1"
    assert dotenv.load_dotenv([tmp_path / ".env"]) == {} and "WANDB_DOTENV_TEST_A" not in private_environ


def test_only_tracker_variables_are_loaded_and_the_others_named_in_one_line(tmp_path, private_environ, capsys):
    (tmp_path / ".env").write_text(
        "WANDB_DOTENV_TEST_KEY=kept\nPYTHONPATH=/somewhere\nLD_PRELOAD=/x.so\nWANDB_X_EXECUTABLE=/bin/sh\n"
    )
    private_environ.pop("PYTHONPATH", None)
    assert dotenv.load_dotenv([tmp_path / ".env"]) == {"WANDB_DOTENV_TEST_KEY": "kept"}
    assert not {"PYTHONPATH", "LD_PRELOAD", "WANDB_X_EXECUTABLE"} & set(private_environ)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"warning: {tmp_path / '.env'}: ignored PYTHONPATH, LD_PRELOAD, WANDB_X_EXECUTABLE: a .env sets only tracker "
        "variables (WANDB_*); set others in the shell"
    )


SITECUSTOMIZE = "import pathlib; pathlib.Path('{marker}').write_text('ran')\n"


@pytest.mark.integration  # starts a process: Python subprocesses
def test_a_dotenv_in_the_working_directory_cannot_load_code_into_child_processes(tmp_path):
    """The attack the allow-list closes: PYTHONPATH=<a dir with sitecustomize.py> in a .env where the command runs
    ran that code in every Python child (the wandb process)."""
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "marker"
    (planted / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker=marker))
    (tmp_path / ".env").write_text(f"PYTHONPATH={planted}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_DOTENV", "PYTHONPATH")}
    load_then_spawn = (
        "import subprocess, sys; from lab import dotenv; dotenv.load_dotenv(); "
        "subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    )
    src = str(dotenv.REPO_ROOT / "src")
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r}); {load_then_spawn}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists() and "ignored PYTHONPATH" in proc.stderr


def test_entry_scripts_load_the_current_directorys_env_before_hydra(tmp_path, monkeypatch, private_environ):
    (tmp_path / ".env").write_text("WANDB_DOTENV_TEST_KEY=from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    seen = {}

    def hydra_main():  # stands in for an entry script's @hydra.main function
        seen["key"] = os.environ.get("WANDB_DOTENV_TEST_KEY")

    cli.main(hydra_main, "train")
    assert seen == {"key": "from-dotenv"}


def test_the_example_file_sets_nothing_until_a_line_is_uncommented(repo):
    text = (repo / ".env.example").read_text()
    assert dotenv.parse(text, source=".env.example") == {}
    uncommented = "\n".join(
        line.removeprefix("# ") for line in text.splitlines() if line.startswith("# ") and "=" in line
    )
    assert {"WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT"} <= set(dotenv.parse(uncommented, source=".env.example"))
