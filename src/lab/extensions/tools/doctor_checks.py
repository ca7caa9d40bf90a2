"""One row of the doctor's report, and how rows are made."""

from __future__ import annotations

from dataclasses import dataclass

INSTALL_FIX = "reinstall the lock's versions: `make install` (or `pip install -c requirements.txt -e '.[<extras>]'`)"
MIN_PYTHON = (
    3,
    11,
)  # pyproject.toml requires-python: the lock pins numpy 2.4 and scipy 1.17, which have no 3.10 wheels


@dataclass
class Check:
    name: str
    status: str  # ok | warn | FAIL
    detail: str
    fix: str = ""


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warn(name: str, detail: str, fix: str = "") -> Check:
    return Check(name, "warn", detail, fix)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, "FAIL", detail, fix)
