"""Where a run came from: git commit, dirty flag and diff, package versions, host. No torch import at module level."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # src/lab/tracking/provenance.py -> repository root


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_info(root: Path = REPO_ROOT) -> dict:
    """Commit, branch and dirty flag of the checkout the code runs from (not the current directory's)."""
    commit = _git("rev-parse", "HEAD", cwd=root)
    if commit is None:
        return {"git_commit": None, "git_branch": None, "git_dirty": None, "git_note": f"{root} is not a git checkout"}
    status = _git("status", "--porcelain", "--untracked-files=no", cwd=root)
    return {
        "git_commit": commit,
        "git_branch": _git("rev-parse", "--abbrev-ref", "HEAD", cwd=root),
        "git_dirty": bool(status),
    }


def git_diff(root: Path = REPO_ROOT) -> str:
    return _git("diff", "HEAD", cwd=root) or ""


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
