"""Take the template's later changes into a fork that `make rename` renamed:

    git remote add upstream <the template's repository>     # once
    make update                  # or: python scripts/update_template.py [--ref v0.2.0] [--base <commit or tag>]

A plain `git merge` of the template into a renamed fork conflicts in every file that mentions the package's name.
This script takes the template's changes renamed: it fetches the `upstream` remote, checks out the template (in
temporary git worktrees) at the commit the fork stands on, the one `.template.json` records, and at the version to
take, renames both to the fork's package name with scripts/rename.py's own rename (the same rewrite, moves and
formatting the fork's rename did) and cherry-picks the difference between the two onto the fork's branch. Git's
three-way merge takes every change of the template that the fork did not change too: only lines changed on both
sides conflict, as a normal cherry-pick conflict (resolve, `git add`, `git cherry-pick --continue`; or
`git cherry-pick --abort`, which leaves the fork as it was). The update is one commit, and it moves `.template.json`
to the version taken.

--ref (REF= with make) names the version: a tag, a branch of the upstream or a commit; by default the template's
newest release tag vX.Y.Z, or its `main` branch while it has none. --base (BASE=) names the template commit or tag
the fork stands on where `.template.json` is missing (a fork renamed before the record existed, or never renamed).
A fork made with GitHub's "Use this template" has its own first commit: its base is found in the template's history
as the commit with the same files.

It refuses, with one line and a non-zero exit, before its work tree is touched: a git tree with changes or
untracked files, an unfinished merge or cherry-pick, no `upstream` remote, a base it cannot find in the template's
history. Standard library only (it runs before .venv exists, as rename.py does).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"v(\d+)\.(\d+)\.(\d+)")  # the template's release tags: vX.Y.Z (CHANGELOG.md)
DEFAULT_BRANCH = "main"


def _load_rename():
    """scripts/rename.py, the rename this script applies to the template's checkouts (not a copy of it)."""
    spec = importlib.util.spec_from_file_location("rename_script", Path(__file__).with_name("rename.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rename = _load_rename()


def newest_release(tags: list[str]) -> str | None:
    """The highest vX.Y.Z among `tags` (by number: v0.10.0 after v0.9.0); None without one."""
    releases = [tag for tag in tags if RELEASE.fullmatch(tag)]
    return max(releases, key=lambda tag: tuple(int(n) for n in RELEASE.fullmatch(tag).groups()), default=None)


def tags_namespace(remote: str) -> str:
    """Where the upstream's tags are fetched to: apart from the fork's own tags, which may use the same names."""
    return f"refs/template/{remote}/tags/"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def git(root: Path, *args: str) -> str:
    """git's output; on a failure, exit with its last line."""
    proc = _run(root, *args)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: git {args[0]} failed: {tail[0]}")
    return proc.stdout.strip()


def commit_of(root: Path, name: str) -> str | None:
    proc = _run(root, "rev-parse", "-q", "--verify", f"{name}^{{commit}}")
    return proc.stdout.strip() if proc.returncode == 0 else None


def is_ancestor(root: Path, older: str, newer: str) -> bool:
    return _run(root, "merge-base", "--is-ancestor", older, newer).returncode == 0


def resolve(root: Path, remote: str, name: str) -> str | None:
    """A tag of the upstream, a branch of the upstream, or any commit (a sha), in that order."""
    for ref in (tags_namespace(remote) + name, f"refs/remotes/{remote}/{name}", name):
        commit = commit_of(root, ref)
        if commit:
            return commit
    return None


def read_record(root: Path) -> dict | None:
    path = root / rename.RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError:
        sys.exit(f"error: {rename.RECORD} is no JSON: restore it (`git checkout {rename.RECORD}`) or pass BASE=")
    return record if isinstance(record, dict) else {}


def refuse_to_start(root: Path, remote: str) -> None:
    """The checks made before anything is fetched or written."""
    changes = rename.git_changes(root)
    if changes is None:
        sys.exit(f"error: {root} is not a git checkout: the update is a git cherry-pick onto your branch")
    for marker, what in (("CHERRY_PICK_HEAD", "cherry-pick"), ("MERGE_HEAD", "merge"), ("REVERT_HEAD", "revert")):
        if commit_of(root, marker):
            sys.exit(f"error: a git {what} is in progress: finish it (`git {what} --continue`) or abort it first")
    if changes:
        sys.exit(
            f"error: the git tree has {len(changes)} uncommitted change(s) (e.g. {changes[0][3:]}): commit or stash "
            "them first, so that the update is one commit of its own"
        )
    if _run(root, "remote", "get-url", remote).returncode != 0:
        sys.exit(
            f"error: no git remote named {remote!r}: add the template's repository first "
            f"(git remote add {remote} <its URL>)"
        )


def find_base(root: Path, remote: str, spec: str, target: str, label: str) -> str:
    """The template's commit the fork stands on: `spec` itself when it is in the template's history up to the
    target; else the commit there with the same files (a fork made with "Use this template" recorded its own first
    commit, whose files are the template's)."""
    commit = resolve(root, remote, spec)
    if commit is None:
        sys.exit(
            f"error: unknown base {spec!r}: no such commit or tag here or in {remote}; pass BASE=<the template's "
            "commit or tag your fork started from>"
        )
    if commit == target or is_ancestor(root, commit, target) or is_ancestor(root, target, commit):
        return commit
    tree = git(root, "rev-parse", f"{commit}^{{tree}}")
    for line in git(root, "log", "--format=%H %T", target).splitlines():
        candidate, candidate_tree = line.split()
        if candidate_tree == tree:
            return candidate
    sys.exit(
        f"error: unknown base {spec[:12]!r}: it is not in the template's history up to {label}, and no commit there "
        "has its files; pass BASE=<the template's commit or tag your fork started from>"
    )


def renamed_tree(root: Path, commit: str, name: str, python: Path, where: Path, record: bytes | None) -> str:
    """The tree of the template at `commit` renamed to `name` (in a temporary worktree), with `record` as its
    .template.json: a git tree object of the fork's repository."""
    git(root, "worktree", "add", "-q", "--detach", str(where), commit)
    old = rename.current_name(where)
    if old != name:
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines are the rename's, not the update's
            rename.rename_tree(where, old, name, python)
    path = where / rename.RECORD
    path.unlink(missing_ok=True)
    if record is not None:
        path.write_bytes(record)
    git(where, "add", "-A")
    return git(where, "write-tree")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", help="the template's tag, branch or commit to take (default: its newest vX.Y.Z tag)")
    parser.add_argument("--base", help=f"the template's commit or tag the fork stands on (default: {rename.RECORD}'s)")
    parser.add_argument("--remote", default="upstream", help="the git remote of the template (default: upstream)")
    parser.add_argument("--python", type=Path, default=ROOT / ".venv" / "bin" / "python", help="the venv's python")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root, remote = args.root.resolve(), args.remote
    python = Path(os.path.abspath(args.python))

    refuse_to_start(root, remote)
    record = read_record(root)
    spec = args.base or (record or {}).get("commit")
    if not spec:
        sys.exit(
            f"error: unknown base: no {rename.RECORD} (`make rename` writes it); pass BASE=<the template's commit "
            "or tag your fork started from>"
        )
    git(
        root,
        "fetch",
        "-q",
        "--no-tags",
        remote,
        f"+refs/heads/*:refs/remotes/{remote}/*",
        f"+refs/tags/*:{tags_namespace(remote)}*",
    )
    tags = git(root, "for-each-ref", "--format=%(refname)", tags_namespace(remote)).split()
    label = args.ref or newest_release([tag.removeprefix(tags_namespace(remote)) for tag in tags]) or DEFAULT_BRANCH
    target = resolve(root, remote, label)
    if target is None:
        sys.exit(f"error: {label!r} is no tag, branch or commit of {remote}")
    base = find_base(root, remote, spec, target, label)
    if base == target or is_ancestor(root, target, base):
        print(f"the fork has the template's {label} already (it stands on {base[:10]}): nothing to take")
        return 0

    name = rename.current_name(root)
    version = rename.current_version(git(root, "show", f"{target}:pyproject.toml"))
    base_version = rename.current_version(git(root, "show", f"{base}:pyproject.toml"))
    recorded = _run(root, "show", f"HEAD:{rename.RECORD}")
    scratch = Path(tempfile.mkdtemp(prefix="template-update-"))
    try:
        before = renamed_tree(root, base, name, python, scratch / "base", recorded.stdout.encode() or None)
        new_record = rename.record_text(target, version).encode()
        after = renamed_tree(root, target, name, python, scratch / "target", new_record)
    finally:
        for checkout in ("base", "target"):
            if (scratch / checkout).exists():
                _run(root, "worktree", "remove", "--force", str(scratch / checkout))
        shutil.rmtree(scratch, ignore_errors=True)
        _run(root, "worktree", "prune")
    message = (
        f"Take the template's {label} ({version}, {target[:10]}), renamed to {name}\n\n"
        f"The template's changes since {base[:10]} ({base_version}), renamed by scripts/update_template.py;\n"
        f"{rename.RECORD} records {target}.\n"
    )
    parent = git(root, "commit-tree", before, "-m", f"The template at {base[:10]}, renamed to {name}")
    update = git(root, "commit-tree", after, "-p", parent, "-m", message)
    picked = _run(root, "cherry-pick", update)
    if picked.returncode != 0:
        conflicts = git(root, "diff", "--name-only", "--diff-filter=U").split()
        if not commit_of(root, "CHERRY_PICK_HEAD"):
            tail = (picked.stderr or picked.stdout).strip().splitlines()[-1:] or ["(no output)"]
            sys.exit(f"error: git cherry-pick failed: {tail[0]}")
        shown = ", ".join(conflicts[:5]) + (", ..." if len(conflicts) > 5 else "")
        print(
            f"error: conflict: {len(conflicts)} file(s) changed both in your fork and in the template's {label} "
            f"({shown}): resolve them, `git add` them, then `git cherry-pick --continue` (`git cherry-pick --abort` "
            "drops the update)",
            file=sys.stderr,
        )
        return 1
    changed = git(root, "diff", "--name-only", "HEAD~1", "HEAD").splitlines()
    print(
        f"took the template's {label} ({version}, {target[:10]}), renamed to {name}: {len(changed)} file(s) in one "
        f"commit; {rename.RECORD} records it. next: review `git show`, run `make test`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
