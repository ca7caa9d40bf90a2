"""Environment doctor: is this machine ready to train? `python -m lab.extensions.tools.doctor` (or `make doctor`).

It prints one row per check (ok / warn / FAIL) with the fix for each failure, and exits 1 when something is broken.
It checks Python; torch, its CUDA build, cuDNN and NCCL; the NVIDIA driver against the build (a CPU-only torch on a
GPU machine is the classic silent pip mistake); each GPU's memory and a matmul checked against the CPU; bf16 and
TF32 support; free disk under outputs/; the wandb mode a run would use; installed packages against
requirements.txt. Only the torch check imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from lab import extras
from lab.extensions.tools.doctor_checks import INSTALL_FIX, MIN_PYTHON, Check, fail, ok, warn
from lab.extensions.tools.torch_checks import check_cuda, check_gpus, check_precision, import_torch, nvidia_smi

REPO = Path(__file__).resolve().parents[4]  # src/lab/extensions/tools/doctor.py -> the repository


# --------------------------------------------------------------------------- python, packages
def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    text = ".".join(map(str, version))
    where = f"{text} ({sys.executable})"
    if tuple(version[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return fail("python", where, f"use Python >= {need}: `make install PYTHON=python{need}` after `rm -rf .venv`")
    venv = sys.prefix != sys.base_prefix
    if not venv:
        return warn("python", f"{where}, not a virtual environment", "`make install` creates .venv")
    return ok("python", where)


def requirements(path: Path) -> list[str]:
    """Return the requirement lines of a requirements file, without comments, blanks and `-r`/`-e` options."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            lines.append(line)
    return lines


def check_packages(path: Path, version_of: Callable[[str], str] = importlib.metadata.version) -> list[Check]:
    """Check that each package of the lock is installed at its pinned version.

    One row covers all that are fine and the extras left out. Each problem gets its own row: a wrong version, or a
    missing package of the core or of a partly installed extra. `make install EXTRAS=` leaves out whole extras,
    never half of one, so a half-installed extra is broken."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:  # pip's own dependency; absent only from a broken environment
        return [fail("packages", "cannot parse requirements: `packaging` is not installed", INSTALL_FIX)]
    if not path.is_file():
        return [warn("packages", f"{path} not found: versions not checked")]

    def is_installed(dist: str) -> bool:
        try:
            version_of(dist)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    wanted = {"", *extras.chosen(is_installed)}
    chosen = {extra: dists for extra, dists in extras.declared().items() if extra in wanted}
    needed = {dist: f"extra {extra}" if extra else "the core" for extra, dists in chosen.items() for dist in dists}
    parents = lock_parents(path)

    def why_needed(name: str) -> str | None:
        """Tell whether a locked package must be installed.

        It must if the core or a chosen extra declares it, or an installed package needs it (pip-compile's
        `# via` lines). In a lock without those lines, every package is needed."""
        if name in needed:
            return needed[name]
        if not parents:
            return "in the lock"
        return next(
            (f"needed by {p}" for p in sorted(parents.get(name, ())) if is_installed(p) and needs(p, name)), None
        )

    rows, fine, named, left_out = [], [], [], []
    for line in requirements(path):
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = version_of(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            why = why_needed(canonicalize_name(requirement.name))
            if why is not None:
                rows.append(fail(f"package {requirement.name}", f"not installed ({why}: {line})", INSTALL_FIX))
            else:
                left_out.append(requirement.name)
            continue
        if requirement.specifier and not requirement.specifier.contains(installed, prereleases=True):
            rows.append(fail(f"package {requirement.name}", f"{installed} installed, wants {line}", INSTALL_FIX))
        else:
            fine.append(requirement.name)
            if canonicalize_name(requirement.name) in needed or not extras.declared():  # declared: named in the row
                named.append(f"{requirement.name} {installed}")
    if fine:
        rows.insert(0, ok("packages", f"{len(fine)} of {len(fine) + len(rows)} match {path.name}: " + ", ".join(named)))
    others = sorted(set(extras.extras()) - set(chosen))
    if left_out:
        rows.append(
            ok("extras", f"not installed: {', '.join(others)} ({len(left_out)} packages of {path.name} left out)")
        )
    return rows


def needs(parent: str, dist: str) -> bool:
    """Tell whether the installed `parent` needs `dist` whatever extras it was installed with.

    The lock's `# via` cannot say this: `urllib3[socks]` brings pysocks only for that extra."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    try:
        lines = importlib.metadata.requires(parent) or []
    except importlib.metadata.PackageNotFoundError:
        return True
    for line in lines:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == dist:
            return requirement.marker is None or requirement.marker.evaluate({"extra": ""})
    return True  # not found among its requirements: trust the lock


def lock_parents(path: Path) -> dict[str, set[str]]:
    """Map each package to the packages that need it, from pip-compile's `# via` annotations.

    The project itself and `-c` constraint files are left out, since the core and extras say what the project
    needs. Return {} for a file without annotations."""
    from packaging.utils import canonicalize_name

    parents: dict[str, set[str]] = {}
    current, annotated = None, False
    for raw in path.read_text().splitlines():
        if raw and not raw.startswith((" ", "#", "-")):
            current = canonicalize_name(re.split(r"[=<>!~ ;\[]", raw, maxsplit=1)[0])
            parents[current] = set()
        elif current is not None and raw.startswith("    #"):
            annotated = True
            name = raw.strip().lstrip("#").strip().removeprefix("via").strip()
            if name and not name.startswith("-") and not name.endswith("(pyproject.toml)"):
                parents[current].add(canonicalize_name(name))
    return parents if annotated else {}  # hand-written file: nothing known of who needs what


def check_support(version_of: Callable[[str], str] = importlib.metadata.version) -> Check:
    """Check Python and torch against the versions in pyproject.toml, which CI runs."""
    try:
        from packaging.requirements import Requirement
        from packaging.specifiers import SpecifierSet

        meta = importlib.metadata.metadata(extras.PROJECT)
        torch_range = next(
            Requirement(line).specifier for line in meta.get_all("Requires-Dist") or [] if line.startswith("torch")
        )
        # an email Message, which has get(); typing's PackageMetadata declares it from Python 3.12 on
        python_range = SpecifierSet(meta.get("Requires-Python") or "")  # type: ignore[attr-defined]
        torch_version = version_of("torch")
    except (ImportError, importlib.metadata.PackageNotFoundError, StopIteration):
        return warn("support", "the project or torch is not installed: the support matrix is not checked", INSTALL_FIX)
    python = platform.python_version()
    detail = f"Python {python} (tested: {python_range}), torch {torch_version} (tested: {torch_range})"
    if python in python_range and torch_range.contains(torch_version, prereleases=True):
        return ok("support", detail)
    return warn("support", f"{detail}: outside what CI runs", "`make install` (the lock's torch) on a tested Python")


# --------------------------------------------------------------------------- disk, wandb
def check_disk(path: Path, min_free_gib: float) -> Check:
    where = path if path.exists() else next((p for p in path.parents if p.exists()), Path("/"))
    usage = shutil.disk_usage(where)
    free = usage.free / 2**30
    detail = f"{free:.1f} GiB free of {usage.total / 2**30:.1f} GiB under {path}"
    if free < min_free_gib:
        return fail(
            "disk",
            f"{detail} (< {min_free_gib:g} GiB: checkpoints fail to save)",
            "free space (`make clean` deletes run outputs) or write runs elsewhere: hydra.run.dir=/bigger/disk/...",
        )
    if free < 5 * min_free_gib:
        return warn("disk", detail, "runs keep checkpoints: free space soon (`make clean`)")
    return ok("disk", detail)


def check_wandb() -> Check:
    """Report the mode `logger.wandb.mode=auto` resolves to, and why."""
    try:
        from lab.tracking.wandb_backend import has_wandb_credentials, resolve_mode
    except Exception as err:  # torch-free, but a broken install may still break it
        return warn("wandb", f"cannot resolve the mode: {str(err).splitlines()[0]}", INSTALL_FIX)

    mode = resolve_mode("auto")
    env = os.environ.get("WANDB_MODE")
    if env:
        why = f"WANDB_MODE={env}"
    elif has_wandb_credentials():
        why = "credentials found (WANDB_API_KEY or a netrc entry from `wandb login`)"
    else:
        why = "no credentials (WANDB_API_KEY or `wandb login`): runs are written to <run dir>/wandb, `wandb sync` later"
    try:
        version = importlib.metadata.version("wandb")
    except importlib.metadata.PackageNotFoundError:
        return warn(
            "wandb", f"not installed; logger.wandb.mode=auto would be {mode}", f"use logger=none, or {INSTALL_FIX}"
        )
    return ok("wandb", f"{version}, logger.wandb.mode=auto -> {mode}: {why}")


# --------------------------------------------------------------------------- the report
def run_checks(outputs: Path, requirements_path: Path, min_free_gib: float) -> Iterator[Check]:
    yield check_python()
    yield check_support()
    torch, row = import_torch()
    yield row
    if torch is not None:
        yield from check_cuda(torch, nvidia_smi())
        if torch.cuda.is_available():
            yield from check_gpus(torch)
        yield from check_precision(torch)
    yield check_disk(outputs, min_free_gib)
    yield check_wandb()
    yield from check_packages(requirements_path)


def table(rows: list[Check]) -> str:
    width = max(len(row.name) for row in rows)
    return "\n".join(f"{row.status:<4}  {row.name:<{width}}  {row.detail}" for row in rows)


def report(rows: list[Check]) -> tuple[str, int]:
    """Return the printed report and the exit status, 1 when any check failed."""
    header = f"lab doctor: {platform.node()} {platform.system()} {platform.machine()}"
    lines = [header, table(rows)]
    failures = [row for row in rows if row.status == "FAIL"]
    warnings = [row for row in rows if row.status == "warn" and row.fix]
    if warnings:
        lines += ["", "worth a look:", *(f"  {row.name}: {row.fix}" for row in warnings)]
    if failures:
        lines += ["", f"{len(failures)} problem(s):", *(f"  {row.name}: {row.fix}" for row in failures)]
    else:
        lines += ["", "all checks passed"]
    return "\n".join(lines), 1 if failures else 0


# --------------------------------------------------------------------------- the command
def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.extensions.tools.doctor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--outputs", type=Path, default=REPO / "outputs", help="where runs are written (disk check)")
    parser.add_argument("--requirements", type=Path, default=REPO / "requirements.txt")
    parser.add_argument("--min-free-gb", type=float, default=1.0, help="less free disk than this fails (GiB)")
    args = parser.parse_args()
    rows = list(run_checks(args.outputs, args.requirements, args.min_free_gb))
    text, status = report(rows)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
