"""scripts/rename.py on its own: which mentions of the old name it renames (string escapes, literals, paths, imports)
and which words that merely contain it stay, and a rename of a small tree holding such literals: it imports with
the new name, every literal reads as before with the new name, and ruff finds nothing (imports re-sorted, lines the
longer name pushed over the limit wrapped or marked).

The old name is read from pyproject.toml and every text here is built from it, never spelled: a renamed fork runs
these tests unchanged (its rename does not reach into them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, load_file

OLD = re.search(r'^name\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)
NEW = "myproject" if OLD != "myproject" else "myproject2"
BS = "\\"  # one backslash, as it stands in a source file


rename = load_file(REPO / "scripts" / "rename.py")


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


# (the text, what it reads after the rename) as the characters stand in a file
RENAMED = [
    (f'"{BS}n{OLD}.errors.UserError"', f'"{BS}n{NEW}.errors.UserError"'),  # a newline escape, then the name
    (f"'{BS}t{OLD}'", f"'{BS}t{NEW}'"),
    (f'"a{BS}r{BS}n{OLD}.x"', f'"a{BS}r{BS}n{NEW}.x"'),
    (f'"{BS}x0a{OLD}.x"', f'"{BS}x0a{NEW}.x"'),
    (f'"{BS}{BS}{BS}n{OLD}.x"', f'"{BS}{BS}{BS}n{NEW}.x"'),  # an escaped backslash, then a newline escape
    (f'"{OLD}.errors"', f'"{NEW}.errors"'),
    (f"'{OLD}'", f"'{NEW}'"),
    (f'f"{{name}}{OLD}.x {{{OLD}.y}}"', f'f"{{name}}{NEW}.x {{{NEW}.y}}"'),
    (f'f"{OLD}.{{module}}"', f'f"{NEW}.{{module}}"'),
    (f"src/{OLD}/data/folder.py", f"src/{NEW}/data/folder.py"),
    (f"import {OLD}", f"import {NEW}"),
    (f"import {OLD}.config", f"import {NEW}.config"),
    (f"from {OLD}.x import y", f"from {NEW}.x import y"),
    (f"from {OLD} import x", f"from {NEW} import x"),
    (f"_target_: {OLD}.sweeps.summary.SweepSummary", f"_target_: {NEW}.sweeps.summary.SweepSummary"),
    (f"${{{OLD}.direction:val/loss}}", f"${{{NEW}.direction:val/loss}}"),
    (f"{OLD}_sweepers", f"{NEW}_sweepers"),  # the prefix of a name: the Hydra plugins' package
    (f"src/hydra_plugins/{OLD}_sweepers/grid.py", f"src/hydra_plugins/{NEW}_sweepers/grid.py"),
    (f"class {_camel(OLD)}Config:", f"class {_camel(NEW)}Config:"),
]
# words that contain the name but are no mention of it
KEPT = [
    f"{OLD}el",  # `label`
    f"col{OLD}",  # `collab`
    f"{OLD}2",
    f"my_{OLD}",
    f"{_camel(OLD)}el",  # `Label`: the class prefix wants a capital after it
    f"{BS}{BS}n{OLD}",  # an escaped backslash, then the word n<old>
    f"{OLD}{_camel(OLD)}",
]


@pytest.mark.parametrize(("text", "renamed"), RENAMED)
def test_every_mention_is_renamed_escapes_and_literals_included(text: str, renamed: str) -> None:
    assert rename.replacer(OLD, NEW)(text) == renamed


@pytest.mark.parametrize("word", KEPT)
def test_a_word_that_merely_contains_the_name_is_left_alone(word: str) -> None:
    assert rename.replacer(OLD, NEW)(word) == word
    assert rename.replacer(OLD, NEW)(f"x = {word}.y  # {word}") == f"x = {word}.y  # {word}"


def test_a_name_whose_first_letter_a_backslash_escapes_is_no_mention_there() -> None:
    old = "n" + OLD  # "\n" + its rest is a newline, then a word that is not the name
    replace = rename.replacer(old, NEW)
    assert replace(f'"{BS}{old}"') == f'"{BS}{old}"'
    assert replace(f'"{BS}n{old}.x"') == f'"{BS}n{NEW}.x"'
    assert replace(f'"{BS}{BS}{old}.x"') == f'"{BS}{BS}{NEW}.x"'  # an escaped backslash, then the name


def test_the_ruff_requirement_is_the_locks_pin() -> None:
    requirement = rename.ruff_requirement(REPO)
    assert re.fullmatch(r"ruff==[\d.]+", requirement) and requirement in (REPO / "requirements.txt").read_text()


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _fill(head: str, tail: str) -> str:
    """head, x's, tail: 116 characters, under ruff's limit of 120 with OLD in tail, over it with TREE_NEW."""
    return f"{head} {'x' * (116 - len(head) - len(tail) - 2)} {tail}"


TREE_NEW = f"zz{OLD}project"  # longer than OLD (lines grow) and sorting after it, whatever OLD is


@pytest.mark.integration  # git and ruff run as processes
def test_a_tree_holding_such_literals_is_renamed_and_lints_clean(tmp_path: Path) -> None:
    """A small project named OLD: its literals read the same with the new name after the rename, the imports are
    re-sorted, and the lines the longer name pushes over the limit are wrapped (docstring, comment) or marked."""
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("needs ruff in this Python")
    new, mid = TREE_NEW, f"{OLD}0"  # `mid` sorts after OLD and before TREE_NEW: the renamed imports need re-sorting
    docstring, comment = _fill('"""A docstring', f"{OLD}.errors"), _fill("# a comment", f"({OLD}.errors)")
    long = _fill('LONG = "', f'{OLD}"')
    files = {
        "pyproject.toml": f'[project]\nname = "{OLD}"\nversion = "0"\n\n[tool.ruff]\nline-length = 120\n'
        '[tool.ruff.lint]\nselect = ["E", "F", "I", "W"]\n',
        f"src/{OLD}/__init__.py": "",
        f"src/{OLD}/errors.py": "class UserError(RuntimeError):\n    pass\n",
        f"src/{mid}/__init__.py": "",
        f"src/hydra_plugins/{OLD}_sweepers/__init__.py": f'PLUGIN = "{OLD}_sweepers"\n',
        f"src/{OLD}/literals.py": (
            f'{docstring}\nand the rest of its paragraph.\n"""\n\n'
            "import os\n\n"
            f"import {OLD}.errors\n"
            f"import {mid}\n"
            f"from {OLD} import errors\n\n"
            f"{comment}\n"
            "# its next line\n"
            f'NEWLINE = "{BS}n{OLD}.errors.UserError: bad"\n'
            f"TAB = '{BS}t{OLD}'\n"
            f'QUOTED = "{OLD}.errors"\n'
            f'FSTRING = f"{BS}n{{os.sep}}{OLD}/{{errors.__name__}}"\n'
            f'PATH = "src/{OLD}/data/x.py"\n'
            f'WORDS = "label collab my_{OLD} {OLD}el col{OLD} {OLD}2 {mid}"\n'
            f"{long}\n"
            f"MODULE = {OLD}.errors.UserError.__module__\n"
            f"MID = {mid}.__name__\n"
        ),
    }
    tree = tmp_path / "fork"
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    _git("init", "-q", cwd=tree)
    _git("add", "-A", cwd=tree)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree", cwd=tree)
    before = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=tree, capture_output=True, text=True)
    assert before.returncode == 0, before.stdout  # the tree lints clean before the rename

    cmd = [sys.executable, str(REPO / "scripts/rename.py"), new, "--no-install", "--python", sys.executable]
    done = subprocess.run([*cmd, "--root", str(tree)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tree / "src" / new / "literals.py").is_file() and not (tree / "src" / OLD).exists()
    assert (tree / "src/hydra_plugins" / f"{new}_sweepers" / "__init__.py").is_file()
    assert (tree / "src" / mid / "__init__.py").is_file()

    names = ["PLUGIN", "NEWLINE", "TAB", "QUOTED", "FSTRING", "PATH", "WORDS", "LONG", "MODULE", "MID"]
    code = f"import json, hydra_plugins.{new}_sweepers as p, {new}.literals as m; print(json.dumps(["
    code += ", ".join(f"{'p' if name == 'PLUGIN' else 'm'}.{name}" for name in names) + "]))"
    read = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tree / "src")},
        capture_output=True,
        text=True,
    )
    assert read.returncode == 0, read.stderr
    assert dict(zip(names, json.loads(read.stdout), strict=True)) == {
        "PLUGIN": f"{new}_sweepers",
        "NEWLINE": f"\n{new}.errors.UserError: bad",
        "TAB": f"\t{new}",
        "QUOTED": f"{new}.errors",
        "FSTRING": f"\n{os.sep}{new}/{new}.errors",
        "PATH": f"src/{new}/data/x.py",
        "WORDS": f"label collab my_{OLD} {OLD}el col{OLD} {OLD}2 {mid}",
        "LONG": long.split('"')[1].rsplit(" ", 1)[0] + f" {new}",  # its x's, then the name
        "MODULE": f"{new}.errors",
        "MID": mid,
    }
    text = (tree / "src" / new / "literals.py").read_text()
    assert re.search(rf"(?<![\w]){OLD}(?![A-Za-z0-9])", text) is None
    assert f"# ({new}.errors) its next line" in text  # the comment's last word carried onto its next line
    assert f"\n{new}.errors and the rest of its paragraph." in text  # and the docstring's
    assert text.count("# noqa: E501") == 1  # the string: nothing to wrap
    assert text.index(f"import {mid}") < text.index(f"import {new}.errors")  # re-sorted
    for check in (["check", "."], ["format", "--check", "."]):
        ruff = subprocess.run([sys.executable, "-m", "ruff", *check], cwd=tree, capture_output=True, text=True)
        assert ruff.returncode == 0, ruff.stdout[-2000:]
