"""Tracker credentials from `.env`: what the loader reads, that it never overrides the environment, and that
every entry script (through lab.cli.main) loads it before Hydra starts."""

from __future__ import annotations

import os

import pytest

from lab import cli, dotenv


@pytest.fixture(autouse=True)
def private_environ(monkeypatch):
    """A copy of the environment for the test to change: nothing it loads leaks into other tests."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DOTENV_TEST_", "NO_DOTENV"))}
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
    private_environ["DOTENV_TEST_SET"] = "from the shell"
    first, second = tmp_path / "first.env", tmp_path / "second.env"
    first.write_text("DOTENV_TEST_SET=from the file\nDOTENV_TEST_A=first\n")
    second.write_text("DOTENV_TEST_A=second\nDOTENV_TEST_B=second\n")
    loaded = dotenv.load_dotenv([first, tmp_path / "missing.env", second])
    assert loaded == {"DOTENV_TEST_A": "first", "DOTENV_TEST_B": "second"}
    assert private_environ["DOTENV_TEST_SET"] == "from the shell"
    assert (private_environ["DOTENV_TEST_A"], private_environ["DOTENV_TEST_B"]) == ("first", "second")


def test_no_dotenv_skips_loading(tmp_path, private_environ):
    (tmp_path / ".env").write_text("DOTENV_TEST_A=1\n")
    private_environ["NO_DOTENV"] = "1"
    assert dotenv.load_dotenv([tmp_path / ".env"]) == {} and "DOTENV_TEST_A" not in private_environ


def test_entry_scripts_load_the_current_directorys_env_before_hydra(tmp_path, monkeypatch, private_environ):
    (tmp_path / ".env").write_text("DOTENV_TEST_KEY=from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    seen = {}

    def hydra_main():  # stands in for an entry script's @hydra.main function
        seen["key"] = os.environ.get("DOTENV_TEST_KEY")

    cli.main(hydra_main)
    assert seen == {"key": "from-dotenv"}


def test_the_example_file_sets_nothing_until_a_line_is_uncommented(repo):
    text = (repo / ".env.example").read_text()
    assert dotenv.parse(text, source=".env.example") == {}
    uncommented = "\n".join(
        line.removeprefix("# ") for line in text.splitlines() if line.startswith("# ") and "=" in line
    )
    assert {"WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT"} <= set(dotenv.parse(uncommented, source=".env.example"))
