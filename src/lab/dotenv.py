"""Load tracker credentials and settings from a `.env` file (see `.env.example`) at the start of every entry script.

`.env` in the current directory is read first, then at the checkout's root. A variable already set is never
overridden, so `WANDB_API_KEY=... python ...` and CI secrets win; `NO_DOTENV=1` skips both. Only `WANDB_*` is loaded,
never wandb's internal `WANDB_X_*`/`WANDB__*`: a `.env` lies wherever the command runs from, and other variables
could change what runs (`PYTHONPATH` or `LD_PRELOAD` would load code into this process and the tracker's child).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # src/lab/dotenv.py -> repository root

ALLOWED = ("WANDB_*",)  # what .env may set (.env.example documents them)
NOT_ALLOWED = ("WANDB_X_*", "WANDB__*")  # wandb's internal settings, such as its executable
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def parse(text: str, source: str = ".env") -> dict[str, str]:
    """Return the variables a .env text sets. A line that is no assignment is skipped with a warning."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            print(f"warning: {source}:{number}: not KEY=value, ignored", file=sys.stderr)
            continue
        key, value = match.groups()
        values[key] = _unquote(value)
    return values


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]  # single quotes are literal
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), value[1:-1])
    return re.split(r"\s+#", value, maxsplit=1)[0]  # unquoted, a ` #` starts a comment


def load_dotenv(files: Iterable[str | Path] | None = None) -> dict[str, str]:
    """Set the files' variables the environment lacks, the first file winning; return those set."""
    if os.environ.get("NO_DOTENV", "") not in ("", "0"):
        return {}
    loaded: dict[str, str] = {}
    seen: set[Path] = set()
    for file in [Path.cwd() / ".env", REPO_ROOT / ".env"] if files is None else map(Path, files):
        path = file.resolve()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        values = parse(path.read_text(), source=str(file))
        ignored = [key for key in values if not allowed(key)]
        if ignored:
            print(
                f"warning: {file}: ignored {', '.join(ignored)}: a .env sets only tracker variables "
                f"({', '.join(ALLOWED)}); set others in the shell",
                file=sys.stderr,
            )
        for key, value in values.items():
            if allowed(key) and key not in os.environ:
                os.environ[key] = loaded[key] = value
    return loaded


def allowed(key: str) -> bool:
    """Whether a .env may set `key` (case-sensitive, as the environment is)."""
    return any(fnmatchcase(key, p) for p in ALLOWED) and not any(fnmatchcase(key, p) for p in NOT_ALLOWED)
