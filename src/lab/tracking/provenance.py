"""Record where a run came from: git commit, dirty flag, the code's changes, package versions, host.

`collect()` runs on every rank at every start; `record()` runs on rank 0 and writes `<run dir>/provenance/`, so
`git checkout <commit> && git apply git.diff` gives the code the run ran. Untracked files count as a change, since a
model added as new files is one. git.diff is uploaded to wandb, so nothing that looks like a credential goes in: a
file with a credential's name or content, or a tracked file's change that adds one, is only named. No torch import
at module level.
"""

from __future__ import annotations

import fnmatch
import hashlib
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
MAX_FILE_BYTES = 256 * 1024  # a larger untracked file (data, weights, logs) is named, not recorded
MAX_TOTAL_BYTES = 2 * 1024 * 1024  # for all untracked files, as git.diff is attached to every wandb run
# untracked files whose contents are recorded: code the run imports and configs it composes
CODE_FOLDERS = ("src/", "conf/", "scripts/")
CODE_SUFFIXES = (".py", ".yaml", ".yml")
# names that may hold credentials: never copied into git.diff (wandb uploads it), nor hashed
SECRET_NAMES = (
    *(".env", ".env.*", "*.env", ".netrc", ".pypirc", ".npmrc", ".git-credentials", ".dockercfg", "kaggle.json"),
    *("*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*"),
    *("*secret*", "*credential*", "*service?account*", "*password*", "*passwd*", "*api?key*", "*apikey*"),
    *("token", "token.*", "*[-_.]token", "*[-_.]token[-_.]*", "token[-_.]*"),  # not tokens.py, tokenizer.py
)
# credentials inside a file: private keys, common providers' token formats, and a key, secret, token or password
# set to a literal with a digit in it (in an .ini, .env or YAML line, or a Python string)
SECRET_CONTENT = re.compile(
    "|".join(
        (
            r"-----BEGIN [A-Z ]*PRIVATE KEY( BLOCK)?-----",
            r"\b(AKIA|ASIA)[0-9A-Z]{16}\b|aws_secret_access_key",  # AWS
            r"\bgh[pousr]_[A-Za-z0-9]{36,}|\bgithub_pat_[A-Za-z0-9_]{22,}|\bglpat-[A-Za-z0-9_-]{20,}",  # GitHub, GitLab
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"\bAIza[0-9A-Za-z_-]{35}|\"type\"\s*:\s*\"service_account\"|\"private_key\"\s*:",  # Google
            r"\bsk-[A-Za-z0-9_-]{20,}|\b[sr]k_(live|test)_[A-Za-z0-9]{16,}",  # OpenAI, Anthropic, Stripe
            r"\bhf_[A-Za-z0-9]{30,}|\bpypi-[A-Za-z0-9_-]{50,}|\bnpm_[A-Za-z0-9]{36}",  # Hugging Face, PyPI, npm
            r"\"key\"\s*:\s*\"[0-9a-f]{32}\"",  # Kaggle
            r"(?i:api[_-]?key|secret|token|passw(or)?d)[\w.-]*[\"']?\s*[:=]\s*[\"']?(?=[^\s\"']*\d)"
            r"[A-Za-z0-9_/+=.~-]{8,}[\"']?\s*(,|$)",
        )
    ),
    re.MULTILINE,
)
CREDENTIALS = "may hold credentials"
_PLAIN_PATH = re.compile(r"^[\w./ +@=,-]+$", re.ASCII)  # a path git writes unquoted in a patch header
_ATTEMPT = re.compile(r"^attempt-(\d+)$")
RUN_FILES = ("this run's own file", "a run dir's file")  # outputs, not code; only named in env.json
RUN_DIR_MARKERS = (".hydra", "metrics.jsonl", "summary.json", "multirun.yaml")  # found in a run or sweep dir


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    return out.stdout


def git_info(root: Path = REPO_ROOT) -> dict:
    """Return the commit, branch and dirty flag of the checkout the code runs from, not the current directory's.

    Dirty means a tracked file differs from the commit, or an untracked, not-ignored file exists. Files in run dirs
    do not count, so a `hydra.run.dir` inside the checkout does not make its own run dirty."""
    head = _git("rev-parse", "HEAD", "--abbrev-ref", "HEAD", cwd=root)
    if head is None:
        return {"git_commit": None, "git_branch": None, "git_dirty": None, "git_note": f"{root} is not a git checkout"}
    commit, *_, branch = head.split()
    entries = (_git("status", "--porcelain", "-z", "--untracked-files=all", cwd=root) or "").split("\0")
    run_dirs: dict[Path, bool] = {}
    # a tracked file's change, or an untracked file outside a run dir (`??` is git's mark of an untracked file)
    dirty = any(e[:2] != "??" or not _in_run_dir(root / e[3:], root, run_dirs) for e in filter(None, entries))
    return {"git_commit": commit, "git_branch": branch, "git_dirty": dirty}


def git_diff(root: Path = REPO_ROOT, skip: Path | None = None) -> tuple[str, dict]:
    """Return `git diff HEAD` plus untracked code and config files as new-file patches, and what was done with each.

    The second value is {"recorded": [paths], "hashed": {path: sha256}, "skipped": {path: why}}. A tracked file
    whose change may hold credentials is in "skipped" too. Files under `skip` (the run dir, when it lies inside the
    checkout) are left out."""
    diff, skipped = _without_credentials(_git("diff", "HEAD", cwd=root) or "")
    listed = _git("ls-files", "--others", "--exclude-standard", "-z", cwd=root) or ""
    patches, recorded, hashed = [], [], {}
    total = 0
    run_dirs: dict[Path, bool] = {}
    for name in filter(None, listed.split("\0")):
        path = root / name
        reason = _not_recordable(name, path, root, skip, run_dirs)
        try:
            data = path.read_bytes() if reason is None else b""
        except OSError:
            reason, data = "unreadable", b""
        if reason is None and SECRET_CONTENT.search(data.decode(errors="replace")):
            reason = CREDENTIALS
        if reason is None and not (name.startswith(CODE_FOLDERS) and name.endswith(CODE_SUFFIXES)):
            hashed[name] = hashlib.sha256(data).hexdigest()  # not code the run imports, so its content is not kept
            continue
        if reason is None and total + len(data) > MAX_TOTAL_BYTES:
            reason = f"over the {_size(MAX_TOTAL_BYTES)} for all untracked files"
        patch = _new_file_patch(name, data, path) if reason is None else None
        if patch is None:
            skipped[name] = reason or "binary"
            continue
        patches.append(patch)
        recorded.append(name)
        total += len(data)
    if diff and patches and not diff.endswith("\n"):
        diff += "\n"
    return diff + "".join(patches), {"recorded": recorded, "hashed": hashed, "skipped": skipped}


def _without_credentials(diff: str) -> tuple[str, dict[str, str]]:
    """Drop from `git diff` each file whose added lines may hold credentials, and return their names."""
    kept, left_out = [], {}
    for section in re.split(r"(?m)^(?=diff --git )", diff):
        added = "\n".join(line[1:] for line in section.splitlines() if line.startswith("+") and line[:4] != "+++ ")
        if SECRET_CONTENT.search(added):
            name = section.split("\n", 1)[0].split(" b/", 1)[-1]
            left_out[name] = f"{CREDENTIALS} (a change of a tracked file)"
        else:
            kept.append(section)
    return "".join(kept), left_out


def _size(count: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:g} {unit}"
    return f"{count} bytes"


def _not_recordable(name: str, path: Path, root: Path, skip: Path | None, run_dirs: dict[Path, bool]) -> str | None:
    """Return why an untracked file is left out by its name, kind or size, or None."""
    if name.endswith("/"):  # a nested git repository has its own history, not ours to copy
        return "a nested git repository"
    if skip is not None and path.is_relative_to(skip):
        return RUN_FILES[0]
    if _in_run_dir(path, root, run_dirs):  # another run's files, in a run dir .gitignore misses
        return RUN_FILES[1]
    if any(fnmatch.fnmatch(path.name.lower(), pattern) for pattern in SECRET_NAMES):
        return CREDENTIALS
    if not _PLAIN_PATH.match(name):
        return "a name git would quote"
    try:
        info = path.lstat()
    except OSError:
        return "unreadable"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > MAX_FILE_BYTES:  # data, weights, logs: never read whole
        return f"over {_size(MAX_FILE_BYTES)}"
    return None


def _in_run_dir(path: Path, root: Path, run_dirs: dict[Path, bool]) -> bool:
    """Whether `path` lies in a run or sweep dir under `root`. `run_dirs` caches the answer per folder."""
    for parent in path.parents:
        if parent == root or parent == parent.parent:
            return False
        if parent not in run_dirs:
            run_dirs[parent] = any((parent / marker).exists() for marker in RUN_DIR_MARKERS)
        if run_dirs[parent]:
            return True
    return False


def _new_file_patch(name: str, data: bytes, path: Path) -> str | None:
    """Return the patch `git diff` would show for `name` as a new file, or None for a binary (NUL byte, not UTF-8)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
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
    """Write this start's provenance into `<run dir>/provenance/`, or `attempt-<n>/` in it for a later start."""
    folder = _attempt_folder(run_dir / "provenance", continuing)
    folder.mkdir(parents=True, exist_ok=True)
    env, written = dict(provenance), []
    if provenance.get("git_commit"):
        diff, untracked = git_diff(root, skip=run_dir.resolve())
        (folder / "git.diff").write_text(diff)
        env["git_untracked"] = untracked
        written.append(folder / "git.diff")
        names = [f"{name} ({why})" for name, why in untracked["skipped"].items() if why not in RUN_FILES]
        names += [f"{name} (not code or config: hashed)" for name in untracked["hashed"]]
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
    """Return `base` for a run's first start and `base/attempt-<n>` for its n-th; a new run drops old attempts."""
    attempts = {int(m.group(1)): p for p in (base.iterdir() if base.is_dir() else ()) if (m := _ATTEMPT.match(p.name))}
    if not continuing:
        for replaced in attempts.values():
            shutil.rmtree(replaced)
        return base
    if not (base / "env.json").is_file():  # the first start died before writing its record
        return base
    return base / f"attempt-{max(attempts, default=1) + 1}"


def collect() -> dict:
    import torch

    versions = {
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),  # TorchVersion is not weights_only-loadable
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "platform": platform.platform(),
        "host": socket.gethostname(),
    }
    return {**git_info(), "versions": versions}
