"""What a forker has to read: the package's source lines, and what the default run imports and runs before its first
`backward()`.

    python bench/footprint.py [--list] [overrides ...]      (default overrides: debug=fast logger=none)

`--list` prints the modules imported and the files run too, each with its lines: where to cut next.

The run is `scripts/train.py` in this process, its run dir in a scratch folder. A profile hook records every package
file one of whose functions is called (module bodies, which run once on import, are not counted); at the first
`Tensor.backward` the figures are taken, and the run goes on to its end as usual. Counts, not timings: the figures
are the same on every machine, so they can be compared across commits (the core/extensions budget: a core of
<= 9,000 lines; <= 45 modules imported, <= 30 files and <= 5,000 lines run before the first backward;
tests/integration/test_budget.py holds the figures reached so far).
"""

from __future__ import annotations

import runpy
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
EXTENSIONS = SRC / "lab" / "extensions"


def lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def package_files() -> list[Path]:
    """The package's source files, its extensions' tests left out (tests are not what a forker reads first)."""
    return sorted(p for p in SRC.rglob("*.py") if "tests" not in p.relative_to(SRC).parts and p.name != "conftest.py")


def is_extension(path: Path) -> bool:
    return EXTENSIONS in path.parents and path.parent != EXTENSIONS


def footprint(overrides: list[str]) -> dict[str, int]:
    """Figures of one in-process run of scripts/train.py, taken at its first backward()."""
    called: set[str] = set()
    taken: dict[str, int] = {}
    src = str(SRC)

    def profile(frame, event, arg) -> None:
        code = frame.f_code
        if event == "call" and code.co_name != "<module>" and code.co_filename.startswith(src):
            called.add(code.co_filename)

    import torch

    backward = torch.Tensor.backward

    def first_backward(self, *args, **kwargs):
        if not taken:
            modules = {
                Path(m.__file__) for m in list(sys.modules.values()) if str(getattr(m, "__file__", "")).startswith(src)
            }
            ran = {Path(f) for f in called}
            taken["listing"] = [(p, p in ran) for p in sorted(modules | ran)]  # type: ignore[assignment]
            taken.update(
                modules_imported=len(modules),
                lines_imported=sum(lines(p) for p in modules),
                files_run=len(ran),
                lines_run=sum(lines(p) for p in ran),
            )
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        return backward(self, *args, **kwargs)

    torch.Tensor.backward = first_backward  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as scratch:
        sys.argv = [str(REPO / "scripts" / "train.py"), *overrides, f"hydra.run.dir={scratch}/run"]
        threading.setprofile(profile)
        sys.setprofile(profile)
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise
        finally:
            sys.setprofile(None)
            torch.Tensor.backward = backward  # type: ignore[method-assign]
    if not taken:
        sys.exit("error: the run ended without a backward(): nothing to measure (is it a training run?)")
    return taken


def main() -> None:
    listing = "--list" in sys.argv[1:]
    overrides = [arg for arg in sys.argv[1:] if arg != "--list"] or ["debug=fast", "logger=none"]
    files = package_files()
    core = [p for p in files if not is_extension(p)]
    extensions = [p for p in files if is_extension(p)]
    print(f"core source: {len(core)} files, {sum(lines(p) for p in core):,} lines under src/ (extensions left out)")
    print(f"extensions: {len(extensions)} files, {sum(lines(p) for p in extensions):,} lines under src/lab/extensions/")
    figures = footprint(overrides)
    print(f"before the first backward() of `scripts/train.py {' '.join(overrides)}`:")
    print(f"  package modules imported: {figures['modules_imported']} ({figures['lines_imported']:,} lines)")
    print(f"  package files whose functions ran: {figures['files_run']} ({figures['lines_run']:,} lines)")
    if listing:
        for path, ran in figures["listing"]:  # type: ignore[union-attr]
            print(f"  {'ran ' if ran else '    '}{lines(path):5d}  {path.relative_to(SRC)}")


if __name__ == "__main__":
    main()
