"""Where a run came from: git commit, dirty flag and the code's changes, package versions, host. No torch import at
module level.

`collect()` (every rank, every start) asks git twice: the commit and branch, and whether anything differs from the
commit, untracked files included (a model added as new files, the README's way, is a change of the code).
`record()` (rank 0) writes `<run dir>/provenance/`: `env.json` (the collected values, the versions, which untracked
files were recorded and which were not) and `git.diff`: `git diff HEAD` followed by every untracked, not-ignored
file as a new-file patch, so `git checkout <commit> && git apply git.diff` makes the code the run ran. Untracked
files are capped (each and in total); binaries, links, possible credentials and other runs' files are left out and
named. A run continued in its own dir records each further start in `provenance/attempt-<n>/` (the first start's
files stay where readers look for them).
"""

from __future__ import annotations

import fnmatch
import logging
import platform
import re
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

from lab.files import write_json

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]  # src/lab/tracking/provenance.py -> repository root
MAX_FILE_BYTES = 256 * 1024  # an untracked file larger than this is named, not recorded (data, weights, logs)
MAX_TOTAL_BYTES = 2 * 1024 * 1024  # all untracked files together: git.diff is attached to every wandb run
# names that may hold credentials: never copied into a record that is uploaded (wandb keeps git.diff)
SECRET_NAMES = (
    *(".env", ".env.*", ".netrc", "*.pem", "*.key", "*.p12"),
    *("id_rsa*", "id_ed25519*", "*secret*", "*credential*"),
)
_PLAIN_PATH = re.compile(r"^[\w./ +@=,-]+$", re.ASCII)  # a path git writes unquoted in a patch header
_ATTEMPT = re.compile(r"^attempt-(\d+)$")
RUN_FILES = ("this run's own file", "a run dir's file")  # left out as outputs, not code: named in env.json only
RUN_DIR_MARKERS = (".hydra", "metrics.jsonl", "summary.json", "multirun.yaml")  # what a run or sweep dir holds


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    return out.stdout


def git_info(root: Path = REPO_ROOT) -> dict:
    """Commit, branch and dirty flag of the checkout the code runs from (not the current directory's). Dirty:
    a tracked file differs from the commit, or an untracked file that .gitignore does not exclude exists (run dirs'
    files aside: a `hydra.run.dir` inside the checkout does not make its own run dirty)."""
    head = _git("rev-parse", "HEAD", "--abbrev-ref", "HEAD", cwd=root)
    if head is None:
        return {"git_commit": None, "git_branch": None, "git_dirty": None, "git_note": f"{root} is not a git checkout"}
    commit, *_, branch = head.split()
    entries = iter((_git("status", "--porcelain", "-z", "--untracked-files=all", cwd=root) or "").split("\0"))
    run_dirs: dict[Path, bool] = {}
    dirty = False
    for entry in filter(None, entries):
        state, name = entry[:2], entry[3:]
        if state != "??":
            dirty = True
            break
        if not _in_run_dir(root / name, root, run_dirs):
            dirty = True
            break
    return {"git_commit": commit, "git_branch": branch, "git_dirty": dirty}


def git_diff(root: Path = REPO_ROOT, skip: Path | None = None) -> tuple[str, dict]:
    """`git diff HEAD` and the untracked, not-ignored files as new-file patches (one text `git apply` takes), and
    what was done with each untracked file: {"recorded": [paths], "skipped": {path: why}}. `skip`: a folder whose
    files are left out (the run dir itself, when it lies inside the checkout)."""
    diff = _git("diff", "HEAD", cwd=root) or ""
    listed = _git("ls-files", "--others", "--exclude-standard", "-z", cwd=root) or ""
    patches, recorded, skipped = [], [], {}
    total = 0
    run_dirs: dict[Path, bool] = {}
    for name in filter(None, listed.split("\0")):
        path = root / name
        reason = _not_recordable(name, path, root, skip, run_dirs)
        size = 0
        if reason is None:
            size = path.lstat().st_size
            if size > MAX_FILE_BYTES:
                reason = f"over {_size(MAX_FILE_BYTES)}"
            elif total + size > MAX_TOTAL_BYTES:
                reason = f"over the {_size(MAX_TOTAL_BYTES)} for all untracked files"
        if reason is None:
            patch = _new_file_patch(name, path)
            reason = "binary" if patch is None else None
        if reason is not None:
            skipped[name] = reason
            continue
        assert patch is not None  # else reason is "binary"
        patches.append(patch)
        recorded.append(name)
        total += size
    if diff and patches and not diff.endswith("\n"):
        diff += "\n"
    return diff + "".join(patches), {"recorded": recorded, "skipped": skipped}


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:g} {unit}"
    return f"{count} bytes"


def _not_recordable(name: str, path: Path, root: Path, skip: Path | None, run_dirs: dict[Path, bool]) -> str | None:
    """Why an untracked file is left out of the record, or None."""
    if name.endswith("/"):  # a nested git repository: its own history, not ours to copy
        return "a nested git repository"
    if skip is not None and path.is_relative_to(skip):
        return RUN_FILES[0]
    if _in_run_dir(path, root, run_dirs):  # another run's files (a run dir inside the checkout .gitignore misses)
        return RUN_FILES[1]
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in SECRET_NAMES):
        return "may hold credentials"
    if not _PLAIN_PATH.match(name):
        return "a name git would quote"
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "unreadable"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    return None


def _in_run_dir(path: Path, root: Path, run_dirs: dict[Path, bool]) -> bool:
    """Whether `path` lies in a run or sweep dir under `root` (`run_dirs`: what is known of each folder)."""
    for parent in path.parents:
        if parent == root or parent == parent.parent:
            return False
        if parent not in run_dirs:
            run_dirs[parent] = any((parent / marker).exists() for marker in RUN_DIR_MARKERS)
        if run_dirs[parent]:
            return True
    return False


def _new_file_patch(name: str, path: Path) -> str | None:
    """The patch `git diff` would show for `name` as a new file; None for a binary (a NUL byte, or not UTF-8)."""
    try:
        data = path.read_bytes()
        text = data.decode()
    except (OSError, UnicodeDecodeError):
        return None
    if "\0" in text:
        return None
    mode = "100755" if path.stat().st_mode & stat.S_IXUSR else "100644"
    header = f"diff --git a/{name} b/{name}\nnew file mode {mode}\n"
    if not text:
        return header
    lines = text.split("\n")
    end = "\n" if lines[-1] == "" else "\n\\ No newline at end of file\n"
    if lines[-1] == "":
        lines.pop()
    body = "".join(f"+{line}\n" for line in lines[:-1]) + f"+{lines[-1]}{end}"
    count = f"1,{len(lines)}" if len(lines) != 1 else "1"
    return f"{header}--- /dev/null\n+++ b/{name}\n@@ -0,0 +{count} @@\n{body}"


def record(run_dir: Path, provenance: dict, continuing: bool, root: Path = REPO_ROOT) -> list[Path]:
    """Write this start's provenance into `<run dir>/provenance/` (a further start of a continuing run: into
    `provenance/attempt-<n>/`); returns the files written."""
    folder = _attempt_folder(run_dir / "provenance", continuing)
    folder.mkdir(parents=True, exist_ok=True)
    env, written = dict(provenance), []
    if provenance.get("git_commit"):
        diff, untracked = git_diff(root, skip=run_dir.resolve())
        (folder / "git.diff").write_text(diff)
        env["git_untracked"] = untracked
        written.append(folder / "git.diff")
        names = [f"{name} ({why})" for name, why in untracked["skipped"].items() if why not in RUN_FILES]
        if names:
            more = f" and {len(names) - 5} more" if len(names) > 5 else ""
            log.warning(
                "untracked files not recorded in %s: %s%s (all named in env.json)",
                folder / "git.diff",
                ", ".join(names[:5]),
                more,
            )
    write_json(folder / "env.json", env)
    return [*written, folder / "env.json"]


def _attempt_folder(base: Path, continuing: bool) -> Path:
    """`base` for a run's first start; `base/attempt-<n>` for its n-th, when it continues in its own dir. A new run
    in the dir replaces the record of the run before it, attempts included."""
    attempts = {int(m.group(1)): p for p in (base.iterdir() if base.is_dir() else ()) if (m := _ATTEMPT.match(p.name))}
    if not continuing:
        for replaced in attempts.values():
            shutil.rmtree(replaced)
        return base
    if not (base / "env.json").is_file():  # the first start died before it wrote its record
        return base
    return base / f"attempt-{max(attempts, default=1) + 1}"


def versions() -> dict:
    import torch

    return {
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),  # TorchVersion is not weights_only-loadable
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "platform": platform.platform(),
        "host": socket.gethostname(),
    }


def collect() -> dict:
    return {**git_info(), "versions": versions()}
