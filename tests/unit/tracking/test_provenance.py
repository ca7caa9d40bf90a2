"""Provenance of a run's code (lab.tracking.provenance) in a checkout of its own: untracked files count as a change
and are recorded so that `git apply` makes the code the run ran; each start of a continuing run keeps its own."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from pathlib import Path

import pytest

from lab.tracking import provenance


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src/model.py").write_text("width = 8\n")
    (repo / ".gitignore").write_text("outputs/\n*.pt\n")
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=repo)
    return repo


@pytest.mark.integration  # starts git
def test_an_untracked_file_makes_the_checkout_dirty_an_ignored_one_or_a_run_dirs_does_not(checkout):
    assert provenance.git_info(checkout)["git_dirty"] is False
    (checkout / "outputs").mkdir()
    (checkout / "outputs/metrics.jsonl").write_text("{}\n")
    (checkout / "best.pt").write_bytes(b"\0weights")
    for run_dir, marker in (("runs/r1", ".hydra/config.yaml"), ("runs/sweep", "multirun.yaml")):
        (checkout / run_dir / marker).parent.mkdir(parents=True, exist_ok=True)  # hydra.run.dir=runs/...: outputs
        (checkout / run_dir / marker).write_text("seed: 1\n")
        (checkout / run_dir / "0").mkdir(exist_ok=True)
        (checkout / run_dir / "0/train.log").write_text("a log\n")
    assert provenance.git_info(checkout)["git_dirty"] is False
    (checkout / "src/new_model.py").write_text("class New: ...\n")
    info = provenance.git_info(checkout)
    assert info["git_dirty"] is True and info["git_branch"] == _git("branch", "--show-current", cwd=checkout).strip()
    assert info["git_commit"] == _git("rev-parse", "HEAD", cwd=checkout).strip()


@pytest.mark.integration  # starts git
def test_git_diff_holds_changes_and_untracked_code_as_a_patch_git_applies(checkout, tmp_path, caplog):
    (checkout / "src/model.py").write_text("width = 16\n")  # a tracked change
    new = {
        "src/models/gated mlp.py": "import torch\n\n\nclass GatedMLP:\n    pass\n",
        "src/models/__init__.py": "",
        "conf/model/gated.yaml": "width: 8",  # no newline at the end
        "scripts/run.py": "#!/usr/bin/env python\nprint('hi')\n",
    }
    for name, text in new.items():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(text)
    (checkout / "scripts/run.py").chmod(0o755)
    (checkout / "notes.txt").write_text("not code the run imports\n")
    (checkout / "weights.bin").write_bytes(b"\x00\x01\x02")
    (checkout / "src/table.bin").write_bytes(b"\x00\x01")  # under src/, but not code
    (checkout / "src/big.py").write_text("x = 1\n" * provenance.MAX_FILE_BYTES)
    (checkout / ".env.local").write_text("WANDB_API_KEY=secret\n")
    (checkout / "runs/old/.hydra").mkdir(parents=True)  # a run dir inside the checkout that .gitignore misses
    (checkout / "runs/old/.hydra/config.yaml").write_text("seed: 1\n")
    (checkout / "runs/old/metrics.jsonl").write_text("{}\n")
    (checkout / "runs/current").mkdir()
    (checkout / "runs/current/train.log").write_text("this run\n")

    diff, untracked = provenance.git_diff(checkout, skip=checkout / "runs/current")
    assert sorted(untracked["recorded"]) == sorted(new)
    assert untracked["hashed"] == {
        name: hashlib.sha256((checkout / name).read_bytes()).hexdigest()
        for name in ("notes.txt", "src/table.bin", "weights.bin")
    }
    assert untracked["skipped"] == {
        ".env.local": "may hold credentials",
        "src/big.py": "over 256 KiB",
        "runs/current/train.log": "this run's own file",
        "runs/old/.hydra/config.yaml": "a run dir's file",
        "runs/old/metrics.jsonl": "a run dir's file",
    }
    assert "WANDB_API_KEY" not in diff and "not code the run imports" not in diff

    # the commit plus git.diff is the code the run ran: applied to a fresh clone, every file comes back as it was
    clone = tmp_path / "clone"
    _git("clone", "-q", str(checkout), str(clone), cwd=tmp_path)
    (tmp_path / "git.diff").write_text(diff)
    _git("apply", str(tmp_path / "git.diff"), cwd=clone)
    assert (clone / "src/model.py").read_text() == "width = 16\n"
    for name, text in new.items():
        assert (clone / name).read_text() == text, name
    assert (clone / "scripts/run.py").stat().st_mode & 0o111
    assert not (clone / "src/models/__init__.py").stat().st_mode & 0o111

    run_dir = checkout / "runs/current"
    with caplog.at_level(logging.WARNING):
        provenance.record(run_dir, {"git_commit": "abc"}, continuing=False, root=checkout)
    assert (run_dir / "provenance/git.diff").read_text() == diff
    env = json.loads((run_dir / "provenance/env.json").read_text())
    assert env["git_untracked"] == untracked  # what was left out, by name, with the record
    (line,) = caplog.messages
    assert line == (
        f"untracked files not recorded in {run_dir / 'provenance/git.diff'}: .env.local (may hold credentials), "
        "src/big.py (over 256 KiB), notes.txt (not code or config: hashed), src/table.bin (not code or config: "
        "hashed), weights.bin (not code or config: hashed) (all named in env.json)"
    )  # run dirs' files are outputs, not code: only env.json names them


# What the probe left in the checkout's root, and the same kinds of content where code is recorded: each a
# file of realistic content whose secret (the end of its last line) must reach neither git.diff nor env.json.
CREDENTIAL_FILES = {
    ".pypirc": "[pypi]\nusername = __token__\npassword = pypi-AgEIcHlwaS5vcmc" + "x" * 60 + "\n",
    ".npmrc": "//registry.npmjs.org/:_authToken=npm_" + "a1B2" * 9 + "\n",
    "kaggle.json": '{"username": "someone", "key": "' + "0a1b2c3d" * 4 + '"}\n',
    "service-account.json": '{"type": "service_account", "private_key_id": "' + "5e6f7a8b" * 5 + '"}\n',
    "token.txt": "hf_" + "AbCdEfGhIj" * 4 + "\n",
    "api_keys.py": 'OPENAI_API_KEY = "sk-proj-' + "Zy9" * 10 + '"\n',
    "config.ini": "[wandb]\napi_key = " + "0123456789abcdef" * 2 + "12345678\n",
    # under src/, conf/ and scripts/: code and config by place, credentials by content
    "src/settings.py": 'GITHUB = "ghp_' + "R2d2C3po" * 5 + '"\n',
    "src/deploy.py": 'KEY = """\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\n"""\n',
    "conf/logger/mine.yaml": "name: wandb\napi_key: " + "9f8e7d6c5b4a" * 3 + "\n",
    "conf/cloud.yaml": "aws_key_id: AKIAABCDEFGHIJKLMNOP\n",
    "scripts/upload.py": 'SLACK = "xoxb-' + "1234-5678-abcdEFGH" + '"\n',
}


@pytest.mark.integration  # starts git
def test_files_that_look_like_credentials_are_named_only(checkout, tmp_path):
    for name, text in CREDENTIAL_FILES.items():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(text)
    (checkout / "src/tokenizer.py").write_text("token = tokenizer.encode(text)\nmax_tokens = 256\n")  # no secret
    (checkout / "src/model.py").write_text('width = 8\nHF_TOKEN = "hf_' + "Qw3" * 12 + '"\n')  # a tracked change

    run_dir = tmp_path / "run"
    provenance.record(run_dir, {"git_commit": "abc"}, continuing=False, root=checkout)
    record = (run_dir / "provenance/git.diff").read_text() + (run_dir / "provenance/env.json").read_text()
    untracked = json.loads((run_dir / "provenance/env.json").read_text())["git_untracked"]
    assert untracked["recorded"] == ["src/tokenizer.py"] and untracked["hashed"] == {}
    assert untracked["skipped"] == {
        "src/model.py": "may hold credentials (a change of a tracked file)",
        **dict.fromkeys(CREDENTIAL_FILES, "may hold credentials"),
    }
    for name in (*CREDENTIAL_FILES, "src/model.py"):
        secret = (checkout / name).read_text().splitlines()[-1][-12:]
        assert secret not in record, name
        assert hashlib.sha256((checkout / name).read_bytes()).hexdigest() not in record, name
    assert "max_tokens = 256" in record


@pytest.mark.integration  # starts git
def test_untracked_files_stop_at_the_total_cap(checkout, monkeypatch):
    monkeypatch.setattr(provenance, "MAX_TOTAL_BYTES", 25)
    for name in ("a.py", "b.py", "c.py"):
        (checkout / "src" / name).write_text("x = 1\n")  # 6 bytes each
    (checkout / "src/d.py").write_text("y = 2" * 3 + "\n")  # 16 bytes: over what is left
    _, untracked = provenance.git_diff(checkout)
    assert untracked == {
        "recorded": ["src/a.py", "src/b.py", "src/c.py"],
        "hashed": {},
        "skipped": {"src/d.py": "over the 25 bytes for all untracked files"},
    }


@pytest.mark.integration  # starts git
def test_each_start_of_a_continuing_run_keeps_its_code_state(checkout, tmp_path):
    run_dir = tmp_path / "run"
    commit = {"git_commit": _git("rev-parse", "HEAD", cwd=checkout).strip()}
    states = ["width = 16\n", "width = 32\n", "width = 64\n"]
    written = []
    for number, state in enumerate(states):
        (checkout / "src/model.py").write_text(state)
        written.append(provenance.record(run_dir, commit, continuing=number > 0, root=checkout))
    folder = run_dir / "provenance"
    assert written == [
        [folder / "git.diff", folder / "env.json"],
        [folder / "attempt-2/git.diff", folder / "attempt-2/env.json"],
        [folder / "attempt-3/git.diff", folder / "attempt-3/env.json"],
    ]
    for files, state in zip(written, states, strict=True):
        assert f"+{state}" in files[0].read_text()

    (checkout / "src/model.py").write_text("width = 8\n")  # a new run in the dir (overwrite=true) replaces them all
    assert provenance.record(run_dir, commit, continuing=False, root=checkout) == [
        folder / "git.diff",
        folder / "env.json",
    ]
    assert sorted(p.name for p in folder.iterdir()) == ["env.json", "git.diff"]
    assert (folder / "git.diff").read_text() == ""


def test_a_first_start_that_wrote_no_provenance_leaves_the_next_one_in_place(tmp_path):
    provenance.record(tmp_path, {"git_commit": None}, continuing=True)
    assert sorted(p.name for p in (tmp_path / "provenance").iterdir()) == ["env.json"]
