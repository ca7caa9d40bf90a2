"""Fixtures for tests that run the real entry scripts in subprocesses."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import venv
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from helpers import Run, made_once, run_script
from lab import extras


@pytest.fixture
def train(tmp_path):
    """train("model=mlp", ...) -> Run in a fresh run dir under tmp_path; asserts success unless check=False."""
    counter = iter(range(1000))

    def _train(*overrides: str, check: bool = True, run_dir: Path | None = None) -> Run:
        run_dir = run_dir or tmp_path / f"run{next(counter)}"
        proc = run_script("train.py", f"hydra.run.dir={run_dir}", *overrides)
        if check:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        return Run(proc, run_dir)

    return _train


# Trained once per test session and shared: the README's commands and the report read them. They sit in one outputs/
# folder, as a user's runs do, so tools that look for a run's eval/export runs find them. Under xdist the workers
# share them too: made by the first worker that asks (under a file lock), found by the other.
@pytest.fixture(scope="session")
def outputs_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp/popen-gw<n>: the parent is this session's, not the worker's
        base = base.parent
    path = base / "project" / "outputs"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A folder of this test session that every xdist worker sees: runs a module's tests share are made there once,
    with made_once(), instead of once per worker that runs one of those tests."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / "shared"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def finished_run(outputs_dir) -> Path:
    """A debug=fast training run (the default CNN on digits) in outputs/train/run."""

    def make() -> None:
        proc = run_script("train.py", "debug=fast", f"hydra.run.dir={run_dir}")
        assert proc.returncode == 0, proc.stderr[-3000:]

    run_dir = outputs_dir / "train" / "run"
    return made_once(run_dir, make)


@pytest.fixture(scope="session")
def finished_export(finished_run, outputs_dir) -> Path:
    """outputs/export/run: model.onnx, model.pt2 and their manifest, exported from finished_run's best.pt."""

    def make() -> None:
        overrides = [f"ckpt_path={finished_run}/checkpoints/best.pt", "export.formats=[onnx,pt2]", "logger=none"]
        proc = run_script("export.py", *overrides, f"hydra.run.dir={run_dir}")
        assert proc.returncode == 0, proc.stderr[-3000:]

    run_dir = outputs_dir / "export" / "run"
    return made_once(run_dir, make)


@pytest.fixture(scope="session")
def finished_sweep(outputs_dir) -> Path:
    """A 2-job grid sweep (debug=fast MLPs, two learning rates) in outputs/train/multirun/sweep."""

    def make() -> None:
        overrides = ["-m", "debug=fast", "model=mlp", "logger=none", "optimizer.lr=1e-3,3e-2"]
        proc = run_script("train.py", *overrides, f"hydra.sweep.dir={sweep_dir}")
        assert proc.returncode == 0, proc.stderr[-3000:]

    sweep_dir = outputs_dir / "train" / "multirun" / "sweep"
    return made_once(sweep_dir, make)


def _core_distributions() -> set[str]:
    """The project and every distribution its core needs (markers evaluated here, no extra)."""
    found, todo = set(), [extras.PROJECT]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found.add(name)
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def _link_tree(site: Path, target: Path, keep: set[PurePosixPath], drop: set[PurePosixPath], at: PurePosixPath) -> None:
    """Link into `target` the entries of `site` under which `keep` has files: a whole folder when none of `drop`'s
    files is inside it, else a real folder whose entries are linked one level down (namespace folders such as
    hydra_plugins/ and nvidia/ hold several distributions' files). `drop`: those files and all their folders."""
    for name in sorted({p.parts[len(at.parts)] for p in keep if len(p.parts) > len(at.parts)}):
        path = at / name
        if path not in drop:
            (target / path).symlink_to(site / path)
        else:
            (target / path).mkdir()
            _link_tree(site, target, {p for p in keep if p.parts[: len(path.parts)] == path.parts}, drop, path)


@pytest.fixture(scope="session")
def core_python(tmp_path_factory) -> Path:
    """The python of what `make install EXTRAS=` (the core alone) gives, at no install cost: a venv whose site-packages
    links to the files of exactly the core's distributions (the project's dependencies without extras, closed over
    their own dependencies) from this test run's environment. So a package of an extra cannot be imported there, its
    metadata is absent, and Hydra's plugin scan does not see the joblib or submitit launchers."""
    root = tmp_path_factory.mktemp("core-env")
    venv.create(root, with_pip=False)
    target = Path(
        subprocess.check_output(
            [root / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    core = _core_distributions()
    assert "optuna" not in core and "torch" in core
    site = Path(importlib.metadata.distribution("torch").locate_file(""))  # this run's site-packages
    keep, drop = set(), set()
    for dist in importlib.metadata.distributions():
        if Path(dist.locate_file("")) != site:  # e.g. an egg-info in src/, which PYTHONPATH brings anyway
            continue
        files = {PurePosixPath(str(f)) for f in dist.files or [] if not str(f).startswith("..")}
        (keep if canonicalize_name(dist.metadata["Name"]) in core else drop).update(files)
    dropped = {folder for file in drop - keep for folder in (file, *file.parents)}
    _link_tree(site, target, keep, dropped, PurePosixPath())
    return root / "bin" / "python"
