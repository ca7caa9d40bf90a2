"""Give the package your project's name when you fork the template:

    make rename NAME=myproject          # or: python scripts/rename.py myproject [--no-install]

The current name is the project name in pyproject.toml. The rename moves `src/<old>/` to `src/<new>/` and the
Hydra plugins `src/hydra_plugins/<old>_sweepers/` to `<new>_sweepers/`, and rewrites every mention of the old name
in the repository's files: imports, `_target_` strings, the `<old>.direction` resolver, the pyproject name, the
wandb project default, README paths, scratch-dir prefixes... (each `<old>` that is a word of its own, also right after
a string's escape as in "\\n<old>.errors", or the `<old>_` prefix of a name, and `<Old>` as the prefix of a class name;
not `<old>` inside a word). A name of another length moves code: the changed Python files are formatted (imports
sorted, code re-wrapped) by the ruff `make lint` runs, .venv's or, without one, the version requirements.txt pins
for (installed into a scratch folder for the rename), and a docstring's or comment's line now over the line limit is
wrapped (a long string gets `# noqa: E501`): `make lint` passes after the rename, as it did before. Then it
reinstalls the project into `.venv`: the old distribution is uninstalled and `pip install -e .` installs the new one,
so no stale distribution is left. The first rename records the commit it renamed (the template's) and its version
in `.template.json`: `make update` (scripts/update_template.py) takes the template's later changes from there.

It refuses, with one line and a non-zero exit: a name that is no valid Python package name (not an identifier, a
keyword, a standard-library module or an installed package it would shadow, a folder of the repository), and a
git tree with changes or untracked files (commit first: the rename is then one diff to review, or to undo with
`git checkout . && git clean -fd`). Running it again with the same name does nothing. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import json
import keyword
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# never rewritten nor moved: tools' and runs' folders (most are git-ignored anyway)
SKIP_DIRS = {".git", ".venv", "outputs", "multirun", "wandb", "data", "__pycache__", ".pytest_cache", ".ruff_cache"}


def current_name(root: Path) -> str:
    """The `name` of pyproject.toml's [project] table."""
    text = (root / "pyproject.toml").read_text()
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, flags=re.M | re.S)
    match = re.search(r'^name\s*=\s*"([^"]+)"', project.group(1) if project else "", flags=re.M)
    if match is None:
        sys.exit("error: pyproject.toml has no [project] name: cannot tell the package's current name")
    return match.group(1)


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


# a character of a word: a mention of `old` starts after none (`bold` is no mention, `older` neither)
_WORD = re.compile(r"[A-Za-z0-9_]")
# a string escape that ends where a mention starts: "\nold.errors" is a newline, then `old.errors` (a backslash run of
# even length before it is escaped backslashes: "\\nold" is a backslash, then the word `nold`)
_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\(?:[abfnrtv]|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|[0-7]{1,3})\Z")
_ESCAPE_LETTERS = "abfnrtvxuUN01234567"  # a backslash before a name starting with one of them escapes that letter


def mentions(old: str) -> re.Pattern[str]:
    """Where `old` may be mentioned: as a word of its own (`old.config`, `src/old/`, `"old"`, "\nold.errors") or as
    the prefix of a name (`old_sweepers`); `substitute` keeps those that start no word."""
    return re.compile(rf"{re.escape(old)}(?![A-Za-z0-9])")


def starts_word(text: str, start: int) -> bool:
    """Whether a word starts at `start`: no word's character before it, or one that ends a backslash escape (the `n`
    of "\n"); not when the word's own first letter is escaped by a backslash before it ("\nlp" is no mention of nlp)."""
    before = text[max(0, start - 32) : start]
    if before.endswith("\\") and text[start : start + 1] in _ESCAPE_LETTERS:
        return (len(before) - len(before.rstrip("\\"))) % 2 == 0
    return not before or _WORD.match(before[-1]) is None or _ESCAPE.search(before) is not None


def substitute(pattern: re.Pattern[str], new: str, text: str) -> str:
    return pattern.sub(lambda m: new if starts_word(m.string, m.start()) else m.group(), text)


def replacer(old: str, new: str):
    words, classes = mentions(old), re.compile(rf"{re.escape(camel(old))}(?=[A-Z])")

    def replace(text: str) -> str:
        return substitute(classes, camel(new), substitute(words, new, text))

    return replace


def refuse_bad_name(name: str, old: str, root: Path) -> None:
    if not name:
        sys.exit("error: give the new package name: make rename NAME=myproject")
    if not name.isidentifier() or not name.isascii():
        hint = re.sub(r"\W", "_", name)
        hint = f" (e.g. {hint})" if hint.isidentifier() and hint.isascii() else ""
        sys.exit(
            f"error: {name!r} is not a valid Python package name: use ASCII letters, digits and underscores, not "
            f"starting with a digit{hint}"
        )
    if keyword.iskeyword(name):
        sys.exit(f"error: {name!r} is a Python keyword: `import {name}` could never work; choose another name")
    if name in sys.stdlib_module_names:
        sys.exit(f"error: {name!r} is a module of Python's standard library: the package would shadow it")
    if name != old and (root / name).exists():
        sys.exit(f"error: {name!r} is a folder of the repository ({root / name}); choose another name")
    if name != old and (root / "src" / name).exists():
        sys.exit(f"error: src/{name} exists already; choose another name")
    if name != old and _installed(name, root):
        sys.exit(f"error: {name!r} is an installed package ({_installed(name, root)}): the project would shadow it")


def _installed(name: str, root: Path) -> str | None:
    """Where `import name` finds something other than this checkout (the script's own folder aside)."""
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (ROOT / "scripts", root / "scripts")]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path[:] = saved
    if spec is None:
        return None
    return spec.origin or ", ".join(spec.submodule_search_locations or []) or name


def git_changes(root: Path) -> list[str] | None:
    """`git status --porcelain` lines (untracked files too), or None when root is no git checkout."""
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, capture_output=True, text=True
        )
    except OSError:
        return None
    return proc.stdout.splitlines() if proc.returncode == 0 else None


def project_files(root: Path) -> list[Path]:
    """The repository's files: what git tracks or would track, else every file outside tools' folders."""
    try:
        proc = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            return sorted({root / p for p in proc.stdout.split("\0") if p and (root / p).is_file()})
    except OSError:
        pass
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files += [Path(folder) / n for n in names]
    return sorted(files)


def rewrite(files: list[Path], replace) -> list[Path]:
    changed = []
    for path in files:
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        new = replace(text)
        if new != text:
            path.write_bytes(new.encode("utf-8"))
            changed.append(path)
    return changed


def move(files: list[Path], root: Path, old: str, new: str) -> list[tuple[Path, Path]]:
    """Move each file whose path names the old package (src/<old>/..., src/hydra_plugins/<old>_sweepers/...);
    the emptied folders go, with their __pycache__."""
    words = mentions(old)
    moves = []
    for path in files:
        rel = path.relative_to(root)
        target = Path(*(substitute(words, new, part) for part in rel.parts))
        if target != rel:
            moves.append((path, root / target))
    for source, target in moves:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
    for folder in sorted({s.parent for s, _ in moves}, key=lambda p: len(p.parts), reverse=True):
        for cache in folder.glob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        while folder != root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
    return moves


def ruff_requirement(root: Path) -> str:
    """ruff as the lock, requirements.txt, pins it (e.g. `ruff==0.17.6`): what `make install` puts into .venv."""
    path = root / "requirements.txt"
    for line in path.read_text().splitlines() if path.is_file() else []:
        requirement = line.split("#", 1)[0].strip()
        if re.match(r"ruff(?![\w.-])", requirement, flags=re.I):
            return requirement
    return "ruff"


def find_ruff(python: Path, root: Path, scratch: Path) -> tuple[list[str] | None, str]:
    """The ruff that `make lint` will run, and where it is from: the environment's; without one, the version that
    requirements.txt pins, installed into `scratch` (what `make install` will install); only when pip cannot
    install it, a ruff at hand (this Python's or the one on PATH)."""
    has_ruff = python.exists() and subprocess.run([str(python), "-m", "ruff", "--version"], capture_output=True)
    if has_ruff and has_ruff.returncode == 0:
        return [str(python), "-m", "ruff"], f"the environment's ({python})"
    requirement = ruff_requirement(root)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-warn-script-location"]
    proc = subprocess.run([*pip, "--target", str(scratch), requirement], cwd=root, capture_output=True, text=True)
    if proc.returncode == 0 and (scratch / "bin" / "ruff").is_file():
        return [str(scratch / "bin" / "ruff")], f"installed for the rename as requirements.txt pins it ({requirement})"
    failed = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no ruff executable"]
    print(f"warning: could not install {requirement} to format the renamed files: {failed[0]}", file=sys.stderr)
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"], f"{sys.executable}'s (its version may not be the one `make lint` runs)"
    if shutil.which("ruff"):
        return ["ruff"], "the one on PATH (its version may not be the one `make lint` runs)"
    return None, ""


def tidy(python: Path, changed: list[Path], root: Path) -> None:
    """A name of another length moves code: ruff sorts the imports and formats the changed Python files (as
    `make format` does), with the ruff `make lint` runs. A docstring's or comment's line that now exceeds the line
    limit is wrapped onto the next; any other (a long string) gets `# noqa: E501`. `make lint` passes then."""
    sources = [str(path) for path in changed if path.suffix == ".py"]
    if not sources:
        return
    with tempfile.TemporaryDirectory(prefix="rename-ruff-") as scratch:
        ruff, origin = find_ruff(python, root, Path(scratch))
        if ruff is None:
            print("warning: no ruff to format the renamed files: run `make format` and shorten the lines it leaves")
            return
        version = subprocess.run([*ruff, "--version"], capture_output=True, text=True).stdout.strip() or "ruff"
        subprocess.run([*ruff, "check", "-q", "--fix", "--select", "I", *sources], cwd=root, capture_output=True)
        subprocess.run([*ruff, "format", "-q", *sources], cwd=root, capture_output=True)
        fitted = 0
        for wrap in (True, False):  # wrapped prose reformatted and checked again: what still exceeds gets the noqa
            long = too_long(ruff, sources, root)
            fitted += sum(fit_lines(path, rows, limit if wrap else None) for path, (rows, limit) in long.items())
            if long and wrap:
                subprocess.run([*ruff, "format", "-q", *map(str, long)], cwd=root, capture_output=True)
        left = too_long(ruff, sources, root)
    print(f"formatted with {version}, {origin}" + (f"; {fitted} line(s) over the line limit fitted" if fitted else ""))
    if left:
        shown = [f"  {path.relative_to(root)}:{row}" for path, (rows, _) in left.items() for row in rows]
        print(f"warning: {len(shown)} line(s) exceed the line limit; shorten them (`make lint` checks):", *shown[:10])


def too_long(ruff: list[str], sources: list[str], root: Path) -> dict[Path, tuple[list[tuple[int, int]], int]]:
    """The files with lines over the line limit, as the project's ruff configuration checks it (E501 selected, files
    not ignored): those rows, each with the row where ruff reads its `# noqa` (a multi-line string's last), and the
    limit."""
    proc = subprocess.run(
        [*ruff, "check", "-q", "--output-format", "json", *sources],
        cwd=root,
        capture_output=True,
        text=True,
    )
    try:
        diagnostics = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        return {}
    found: dict[Path, tuple[list[tuple[int, int]], int]] = {}
    for item in (item for item in diagnostics if item.get("code") == "E501"):
        path = root / item["filename"]  # absolute already: `/` keeps it
        limit = re.search(r"> (\d+)\)", item.get("message", ""))
        row = item["location"]["row"]
        rows = [*found.get(path, ([], 0))[0], (row, item.get("noqa_row") or row)]
        found[path] = (rows, int(limit.group(1)) if limit else 120)
    return found


def fit_lines(path: Path, rows: list[tuple[int, int]], limit: int | None) -> int:
    """Fit the lines `rows` (1-based, each with the row of its noqa) of a Python file under `limit`: a docstring's
    or a comment block's line is wrapped, its last words carried onto the next line of its paragraph (or a new one);
    any other line, or any line when `limit` is None, gets `# noqa: E501` (at a multi-line string's end for its
    lines: ruff reads it there)."""
    lines = path.read_text().split("\n")
    fitted = 0
    for row, noqa in sorted(set(rows), reverse=True):  # from the bottom: a wrap moves the lines below it only
        prose = _prose("\n".join(lines)).get(row)
        if limit is not None and prose is not None and _wrap(lines, row - 1, limit, *prose):
            fitted += 1
        elif not lines[noqa - 1].rstrip().endswith("\\") and "noqa" not in lines[noqa - 1]:
            lines[noqa - 1] = lines[noqa - 1].rstrip() + "  # noqa: E501"
            fitted += 1
    path.write_text("\n".join(lines))
    return fitted


def _prose(text: str) -> dict[int, tuple]:
    """The rows of docstrings and of comment-only lines, each with its text's first column, the prefix its
    continuation lines take, and whether a row continues its paragraph (a test of the row)."""
    lines = text.split("\n")
    try:
        tree = ast.parse(text)
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return {}
    prose: dict[int, tuple] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        doc = node.body[0].value if isinstance(node.body[0], ast.Expr) else None
        if not (isinstance(doc, ast.Constant) and isinstance(doc.value, str)) or doc.end_lineno is None:
            continue
        opening = re.match(r"[rRuU]?('''|\"\"\"|'|\")", lines[doc.lineno - 1][doc.col_offset :])
        if opening is None:
            continue  # implicitly concatenated strings

        def continues(row: int, first: int = doc.lineno, last: int = doc.end_lineno) -> bool:
            text = lines[row - 1].strip()
            return first < row <= last and bool(text) and not text.startswith(('"""', "'''", ">>>", "...", "- ", "* "))

        for row in range(doc.lineno, doc.end_lineno + 1):
            line = lines[row - 1]
            if line.lstrip().startswith((">>>", "...")):
                continue  # a doctest: wrapping would change it
            if row == doc.lineno:
                prose[row] = (doc.col_offset + opening.end(), " " * doc.col_offset, continues)
            else:
                indent = line[: len(line) - len(line.lstrip())]
                prose[row] = (len(indent), indent, continues)
    comments = {token.start[0] for token in tokens if token.type == tokenize.COMMENT}
    for token in tokens:
        row, col = token.start
        marker = re.match(r"#+ *", token.string)
        special = re.match(r"#\s*(noqa|type:|fmt:|pragma|ruff:|isort:|!)", token.string)
        if token.type != tokenize.COMMENT or lines[row - 1][:col].strip() or special or marker is None:
            continue

        def continues(row: int, comments: set[int] = comments) -> bool:
            return row in comments and not lines[row - 1].split("#", 1)[0].strip()

        prose[row] = (col + marker.end(), lines[row - 1][:col] + marker.group(), continues)
    return prose


def _wrap(lines: list[str], index: int, limit: int, start: int, prefix: str, continues) -> bool:
    """Carry the words of lines[index] past `limit` onto the next line of its paragraph (one that starts with the
    same prefix, its text right after it), and so on down; a new line when the paragraph ends. False, nothing
    changed, when a line has no space to break at."""
    edited, row, inserted = lines[:], index + 1, False  # `row`: the file's row number before this wrapping
    while len(edited[index]) > limit:
        line = edited[index]
        cut = line.rfind(" ", start, limit + 1)
        if cut <= start or not line[start:cut].strip():
            return False
        edited[index], carried = line[:cut].rstrip(), line[cut + 1 :].lstrip()
        after = edited[index + 1] if index + 1 < len(edited) else ""
        if not inserted and continues(row + 1) and after.startswith(prefix) and after[len(prefix) :][:1].strip():
            edited[index + 1] = prefix + carried + " " + after[len(prefix) :]
            index, row, start = index + 1, row + 1, len(prefix)
            continue
        edited.insert(index + 1, prefix + carried)
        index, start, inserted = index + 1, len(prefix), True
    lines[:] = edited
    return True


def reinstall(python: Path, old: str, new: str, root: Path) -> None:
    """The old distribution out of the environment, the renamed project in (editable), then `import new` checked."""
    if not python.exists():
        print(f"no environment at {python.parent.parent}: `make install` installs the project under its new name")
        return

    def pip(*args: str) -> None:
        proc = subprocess.run([str(python), "-m", "pip", *args], cwd=root, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            sys.exit(f"error: pip {' '.join(args)} failed: {tail[0]}")

    pip("uninstall", "-y", "-q", old)
    pip("install", "-q", "--no-deps", "-e", str(root))
    check = subprocess.run(
        [str(python), "-c", f"import {new}.config, importlib.metadata as m; m.version({new!r})"],
        cwd=root / "scripts",  # not the repository root: the import must come from the installed project
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        sys.exit(f"error: the reinstalled project does not import: {check.stderr.strip().splitlines()[-1:]}")
    print(f"reinstalled into {python.parent.parent}: {new} (editable); {old} uninstalled")


def rename_tree(root: Path, old: str, new: str, python: Path) -> None:
    """The rename itself: every mention rewritten, the files moved, the changed Python files formatted (what
    scripts/update_template.py also does to the template's checkouts, so that they read as the fork does)."""
    files = project_files(root)
    changed = rewrite(files, replacer(old, new))
    moves = move(files, root, old, new)
    for stale in (root / "src").glob(f"{old}.egg-info"):  # setuptools' metadata of the old distribution
        shutil.rmtree(stale, ignore_errors=True)
    print(f"renamed {old} -> {new}: {len(changed)} files rewritten, {len(moves)} moved")
    moved = dict(moves)
    tidy(python, [moved.get(path, path) for path in changed], root)


# The template's commit and version a fork stands on, written by the first rename, moved on by `make update`
# (scripts/update_template.py). It names no package: a later rename leaves it alone.
RECORD = ".template.json"


def current_version(text: str) -> str:
    """The `version` of a pyproject.toml's [project] table ("" when it has none)."""
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, flags=re.M | re.S)
    match = re.search(r'^version\s*=\s*"([^"]+)"', project.group(1) if project else "", flags=re.M)
    return match.group(1) if match else ""


def record_text(commit: str, version: str) -> str:
    return json.dumps({"commit": commit, "version": version}, indent=2) + "\n"


def record_template_base(root: Path) -> None:
    """The first rename records the commit it renamed (the template's, in a fork cloned from it) in RECORD; a
    fork's later rename keeps the record as it is."""
    if (root / RECORD).exists():
        return
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode != 0:
        print(f"no git commit to record: `make update` will need BASE=<the template's commit> (see {RECORD})")
        return
    commit, version = head.stdout.strip(), current_version((root / "pyproject.toml").read_text())
    (root / RECORD).write_text(record_text(commit, version))
    print(f"recorded the template's commit {commit[:10]} ({version}) in {RECORD}: `make update` starts from it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the new package name (a Python identifier, e.g. myproject)")
    parser.add_argument("--no-install", action="store_true", help="rename files only; leave .venv as it is")
    parser.add_argument("--allow-dirty", action="store_true", help="rename even with uncommitted changes")
    parser.add_argument("--python", type=Path, default=ROOT / ".venv" / "bin" / "python", help="the venv's python")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root, new = args.root.resolve(), args.name
    python = Path(os.path.abspath(args.python))  # absolute (not resolved: a venv's python is a link out of the venv)
    old = current_name(root)

    refuse_bad_name(new, old, root)
    if new == old:
        print(f"the package is named {new} already: nothing to do")
        return 0
    if not (root / "src" / old / "__init__.py").is_file():
        sys.exit(f"error: pyproject.toml names the project {old!r} but src/{old}/__init__.py is missing")
    changes = git_changes(root)
    if not args.allow_dirty:
        if changes is None:
            sys.exit(f"error: {root} is not a git checkout: rename in a clean checkout (or pass --allow-dirty)")
        if changes:
            sys.exit(
                f"error: the git tree has {len(changes)} uncommitted change(s) (e.g. {changes[0][3:]}): commit or "
                "stash them first, so that the rename is one diff of its own"
            )

    rename_tree(root, old, new, python)
    record_template_base(root)
    if not args.no_install:
        reinstall(python, old, new, root)
    print("next: review `git status` and `git diff`, run `make test`, commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
