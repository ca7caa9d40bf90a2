"""`make update` (scripts/update_template.py) in a fork made as a user makes one: the template (a copy of this
repository, committed in a fresh git repository) is cloned, renamed with `make rename`, and changed by the fork;
then the template commits fixes that mention its package (a module changed, a module added, the README), tags a
release and commits more. The commands of docs/extending.md's *Take the template's later fixes* run as written in
the fork (the template's URL is its path here): the newest release arrives renamed into src/<new>/, the fork's own
changes stay, `.template.json` moves to the release, and REF= takes the branch. A change made on both sides is a normal
cherry-pick conflict, with one line saying so; a fork made from the template's files without its history finds its
base; a dirty tree, a missing remote and an unknown base are refused with one line, before anything is touched.

The old name is read from pyproject.toml, never written here: the test keeps working in a fork that was renamed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow

OLD = re.search(r'^name\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)
NEW = "myproject" if OLD != "myproject" else "myproject2"
SECTION = "## Take the template's later fixes"
URL = "<template-url>"
RECORD = ".template.json"  # the fork's record of its template commit (scripts/rename.py)
# a hermetic git: no user's or system's configuration (signing, hooks, default branch), a fixed identity
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _mentions(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9])")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HYDRA_FULL_ERROR") and k[:4] != "GIT_"}
    return {**env, **GIT_ENV, "NO_DOTENV": "1"}


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=_env(), check=True, capture_output=True, text=True).stdout


def _commit(repo: Path, message: str) -> str:
    _git("add", "-A", cwd=repo)
    _git("commit", "-qm", message, cwd=repo)
    return _git("rev-parse", "HEAD", cwd=repo).strip()


def _bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)


def _update(fork: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/update_template.py", "--python", sys.executable, *args]
    return subprocess.run(cmd, cwd=fork, env=_env(), capture_output=True, text=True, timeout=300)


def _record(repo: Path) -> dict:
    return json.loads((repo / RECORD).read_text())


def readme_section_commands() -> list[str]:
    """The lines of the ```sh block of docs/extending.md's section on taking the template's fixes (the README's
    `make update` is its second line)."""
    text = (REPO / "docs" / "extending.md").read_text()
    start = text.index(f"\n{SECTION}\n")
    block = re.search(r"```sh\n(.*?)```", text[start:], flags=re.S)
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def _as_run(command: str, upstream: Path) -> str:
    """The page's command as the test runs it: the template's URL is its path; make runs the scripts with this
    Python (its ruff formats the renamed template, as it formatted the fork's rename)."""
    command = command.replace(URL, shlex.quote(str(upstream)))
    if command.startswith("make "):
        command += f" PYTHON={shlex.quote(sys.executable)} ARGS={shlex.quote('--python ' + sys.executable)}"
    return command


def _template(dest: Path) -> Path:
    """This repository's files (what git tracks plus new files it would add), committed in a fresh repository, as a
    template release holds them: without a fork's `.template.json`. In a renamed fork that record names a commit of
    the template this scenario never had, so the scenario's rename would keep it and `make update` could not start."""
    if shutil.which("git") is None or shutil.which("make") is None or not (REPO / ".git").exists():
        pytest.skip("needs git, make and a git checkout of the repository")
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO).split("\0")
    for rel in listed:
        if rel and rel != RECORD and (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    _git("init", "-q", "-b", "main", cwd=dest)
    _commit(dest, "template")
    return dest


def _rename(fork: Path) -> None:
    """`make rename` as a user runs it (without reinstalling: the copy has no .venv), then the rename committed."""
    args = f"--no-install --python {sys.executable}"
    cmd = ["make", "-s", "rename", f"NAME={NEW}", f"ARGS={args}", f"PYTHON={sys.executable}"]
    proc = subprocess.run(cmd, cwd=fork, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _commit(fork, f"rename to {NEW}")


FIX_MODULE = (
    '"""A module the template adds in a fix."""\n\nfrom {name}.errors import UserError\n\n__all__ = ["UserError"]\n'
)
FIX_COMMENT = "\n\n# a template fix: {name}.errors.UserError is what entry scripts print in one line\n"
FIX_README = "\nA template fix: see src/{name}/template_fix.py.\n"
LATER_README = "\nA later fix on the template's main branch, after its release: {name}.cli.\n"
FORK_DOC = f'"""The fork\'s own words about {NEW}.errors.\n'


def _template_fix(upstream: Path) -> tuple[str, str]:
    """The template's release v0.1.1 (a module changed, one added, the README, the version) and a later commit on
    its main branch; their commits."""
    errors = upstream / "src" / OLD / "errors.py"
    errors.write_text(errors.read_text() + FIX_COMMENT.format(name=OLD))
    (upstream / "src" / OLD / "template_fix.py").write_text(FIX_MODULE.format(name=OLD))
    readme = upstream / "README.md"
    readme.write_text(readme.read_text() + FIX_README.format(name=OLD))
    pyproject = upstream / "pyproject.toml"
    pyproject.write_text(re.sub(r'^version = ".*"$', 'version = "0.1.1"', pyproject.read_text(), count=1, flags=re.M))
    fix = _commit(upstream, "a fix")
    _git("tag", "-a", "v0.1.1", "-m", "v0.1.1", cwd=upstream)
    readme.write_text(readme.read_text() + LATER_README.format(name=OLD))
    return fix, _commit(upstream, "a later fix")


@dataclass
class Scenario:
    upstream: Path
    fork: Path
    start: str  # the template's commit the fork was cloned at
    fix: str  # tagged v0.1.1
    later: str  # main, after the tag
    renamed_record: dict  # .template.json right after the rename
    steps: list[tuple[str, subprocess.CompletedProcess, str, dict]]  # command, its process, HEAD and record after it


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Scenario:
    root = tmp_path_factory.mktemp("template_update")
    upstream = _template(root / "upstream")
    start = _git("rev-parse", "HEAD", cwd=upstream).strip()
    fork = root / "fork"
    _git("clone", "-q", str(upstream), str(fork), cwd=root)
    _git("remote", "remove", "origin", cwd=fork)  # the fork's own origin would be its repository: no template
    _rename(fork)
    renamed_record = _record(fork)
    errors = fork / "src" / NEW / "errors.py"  # the fork rewords the module's first line; the template changes its end
    errors.write_text(FORK_DOC + errors.read_text().split("\n", 1)[1])
    readme = fork / "README.md"
    readme.write_text(re.sub(r"^# .*$", f"# {NEW}: the fork's title", readme.read_text(), count=1, flags=re.M))
    _commit(fork, "the fork's own change")
    fix, later = _template_fix(upstream)
    steps = []
    for command in readme_section_commands():
        proc = _bash(_as_run(command, upstream), fork)
        record = _record(fork) if (fork / RECORD).is_file() else {}
        steps.append((command, proc, _git("rev-parse", "HEAD", cwd=fork).strip(), record))
    return Scenario(upstream, fork, start, fix, later, renamed_record, steps)


def _step(scenario: Scenario, command: str) -> tuple[subprocess.CompletedProcess, str, dict]:
    (found,) = [step[1:] for step in scenario.steps if step[0] == command]
    return found


def test_the_readme_shows_the_remote_and_both_updates():
    assert readme_section_commands() == [
        f"git remote add upstream {URL}",
        "make update",
        "make update REF=main",
    ]


def test_rename_records_the_templates_commit(scenario):
    assert scenario.renamed_record == {"commit": scenario.start, "version": "0.1.0"}
    assert not _mentions(OLD).search((scenario.fork / RECORD).read_text())  # a later rename keeps it


def test_the_readme_commands_run_in_a_renamed_fork(scenario):
    for command, proc, _, _ in scenario.steps:
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_make_update_takes_the_newest_release_renamed_and_keeps_the_forks_changes(scenario):
    proc, head, record = _step(scenario, "make update")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"took the template's v0.1.1 (0.1.1, {scenario.fix[:10]}), renamed to {NEW}" in proc.stdout
    assert record == {"commit": scenario.fix, "version": "0.1.1"}
    fork = scenario.fork
    at = {path: _git("show", f"{head}:{path}", cwd=fork) for path in ("README.md", f"src/{NEW}/errors.py")}
    # the fix, renamed: a changed module, a new one under src/<new>/, the README
    assert _git("show", f"{head}:src/{NEW}/template_fix.py", cwd=fork) == FIX_MODULE.format(name=NEW)
    assert at[f"src/{NEW}/errors.py"].endswith(FIX_COMMENT.format(name=NEW))
    assert FIX_README.format(name=NEW) in at["README.md"]
    assert LATER_README.format(name=NEW) not in at["README.md"]  # main's later commit is no release
    # the fork's own changes, in the same files
    assert at[f"src/{NEW}/errors.py"].startswith(FORK_DOC)
    assert f"# {NEW}: the fork's title\n" in at["README.md"]
    # one commit on the fork's branch; the old name nowhere in it; no worktree left behind
    assert _git("rev-list", "--count", f"{head}^..{head}", cwd=fork).strip() == "1"
    changed = _git("show", "--format=", "--name-only", head, cwd=fork).split()
    assert sorted(changed) == sorted(
        [RECORD, "README.md", "pyproject.toml", f"src/{NEW}/errors.py", f"src/{NEW}/template_fix.py"]
    )
    assert not _mentions(OLD).search(_git("show", head, cwd=fork))
    assert len(_git("worktree", "list", cwd=fork).splitlines()) == 1


def test_ref_takes_the_version_it_names(scenario):
    proc, head, record = _step(scenario, "make update REF=main")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert record == {"commit": scenario.later, "version": "0.1.1"}
    readme = _git("show", f"{head}:README.md", cwd=scenario.fork)
    assert LATER_README.format(name=NEW) in readme and f"# {NEW}: the fork's title\n" in readme
    assert _git("status", "--porcelain", cwd=scenario.fork) == ""


def test_a_second_update_has_nothing_to_take(scenario):
    head = _git("rev-parse", "HEAD", cwd=scenario.fork)
    for args in (["--ref", "main"], []):  # the release is older than what the fork has: nothing either
        proc = _update(scenario.fork, *args)
        assert proc.returncode == 0 and "nothing to take" in proc.stdout, proc.stdout + proc.stderr
    assert _git("rev-parse", "HEAD", cwd=scenario.fork) == head


@pytest.fixture
def copied(scenario, tmp_path) -> tuple[Path, Path]:
    """The scenario's template and fork (after the README's commands), copied: a test may change both."""
    upstream, fork = tmp_path / "upstream", tmp_path / "fork"
    shutil.copytree(scenario.upstream, upstream, symlinks=True)
    shutil.copytree(scenario.fork, fork, symlinks=True)
    _git("remote", "set-url", "upstream", str(upstream), cwd=fork)
    return upstream, fork


def test_a_line_changed_on_both_sides_is_a_git_conflict_said_in_one_line(copied):
    upstream, fork = copied
    (fork / "src" / NEW / "errors.py").write_text(f'"""The fork\'s newer words about {NEW}.errors."""\n')
    _commit(fork, "the fork rewrites errors.py")
    head = _git("rev-parse", "HEAD", cwd=fork).strip()
    (upstream / "src" / OLD / "errors.py").write_text(f'"""The template\'s new words about {OLD}.errors."""\n')
    (upstream / "CONTRIBUTING.md").write_text((upstream / "CONTRIBUTING.md").read_text() + f"\nsrc/{OLD}/ again\n")
    fix = _commit(upstream, "the template rewrites errors.py too")
    proc = _update(fork, "--ref", "main")
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: conflict: 1 file(s) changed both in your fork and in the template's main ")
    assert f"(src/{NEW}/errors.py)" in proc.stderr and "`git cherry-pick --continue`" in proc.stderr
    # git's own conflict state: the conflicted file marked, the rest of the update staged, HEAD where it was
    status = sorted(_git("status", "--porcelain", cwd=fork).splitlines())
    assert status == ["M  .template.json", "M  CONTRIBUTING.md", f"UU src/{NEW}/errors.py"]
    conflicted = (fork / "src" / NEW / "errors.py").read_text()
    assert "<<<<<<< HEAD" in conflicted and f"{NEW}.errors" in conflicted and not _mentions(OLD).search(conflicted)
    assert f"\nsrc/{NEW}/ again\n" in (fork / "CONTRIBUTING.md").read_text()
    assert _git("rev-parse", "HEAD", cwd=fork).strip() == head
    again = _update(fork, "--ref", "main")  # an update on an unfinished one is refused
    assert again.returncode != 0 and again.stderr.startswith("error: a git cherry-pick is in progress")
    # resolved as git asks: the update is one commit and the record names the version taken
    _git("checkout", "--theirs", f"src/{NEW}/errors.py", cwd=fork)
    _git("add", f"src/{NEW}/errors.py", cwd=fork)
    _git("-c", "core.editor=true", "cherry-pick", "--continue", cwd=fork)
    assert _record(fork)["commit"] == fix and _git("rev-parse", "HEAD~1", cwd=fork).strip() == head
    assert _git("status", "--porcelain", cwd=fork) == ""


def test_a_fork_made_from_the_templates_files_finds_its_base(scenario, tmp_path):
    """GitHub's "Use this template": the fork's first commit has the template's files, not its history."""
    fork = tmp_path / "fork"
    fork.mkdir()
    archive = subprocess.run(["git", "archive", scenario.start], cwd=scenario.upstream, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(fork)], input=archive.stdout, check=True)
    _git("init", "-q", "-b", "main", cwd=fork)
    own_first = _commit(fork, "initial commit")
    _rename(fork)
    assert _record(fork)["commit"] == own_first
    _git("remote", "add", "upstream", str(scenario.upstream), cwd=fork)
    proc = _update(fork, "--ref", "v0.1.1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (fork / "src" / NEW / "template_fix.py").read_text() == FIX_MODULE.format(name=NEW)
    assert _record(fork) == {"commit": scenario.fix, "version": "0.1.1"}


def _dirty(fork: Path) -> None:
    (fork / "notes.txt").write_text("not committed\n")


def _no_remote(fork: Path) -> None:
    _git("remote", "remove", "upstream", cwd=fork)


def _no_record(fork: Path) -> None:
    _git("rm", "-q", RECORD, cwd=fork)
    _commit(fork, "no record")


def _unknown_record(fork: Path) -> None:
    (fork / RECORD).write_text(json.dumps({"commit": "0" * 40, "version": "0.1.0"}))
    _commit(fork, "a record of no commit")


@pytest.mark.parametrize(
    ("arrange", "args", "message"),
    [
        (_dirty, [], "error: the git tree has 1 uncommitted change(s) (e.g. notes.txt): commit or stash them first"),
        (_no_remote, [], "error: no git remote named 'upstream': add the template's repository first"),
        (_no_record, [], "error: unknown base: no .template.json (`make rename` writes it); pass BASE="),
        (_unknown_record, [], f"error: unknown base {'0' * 40!r}: no such commit or tag here or in upstream"),
        (lambda fork: None, ["--base", "nonsense"], "error: unknown base 'nonsense': no such commit or tag"),
    ],
    ids=["dirty-tree", "no-upstream-remote", "no-record", "record-of-no-commit", "unknown-BASE"],
)
def test_a_bad_start_is_refused_in_one_line_before_anything_is_touched(copied, arrange, args, message):
    upstream, fork = copied
    (upstream / "README.md").write_text((upstream / "README.md").read_text() + "\nmore\n")
    _commit(upstream, "something to take")
    arrange(fork)
    head, status = _git("rev-parse", "HEAD", cwd=fork), _git("status", "--porcelain", cwd=fork)
    proc = _update(fork, "--ref", "main", *args)
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert (_git("rev-parse", "HEAD", cwd=fork), _git("status", "--porcelain", cwd=fork)) == (head, status)
    assert len(_git("worktree", "list", cwd=fork).splitlines()) == 1
