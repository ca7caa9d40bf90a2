"""`make install EXTRAS=` (the core alone) works: training, evaluation and a pt2 export run, and every option that
needs an extra is refused before anything is written, naming the extra to install.

The environment is real but costs no install: a venv whose site-packages links to the files of exactly the core's
distributions (the project's dependencies without extras, closed over their own dependencies) from this test run's
environment. So a package of an extra cannot be imported there, its metadata is absent, and Hydra's plugin scan
does not see the joblib or submitit launchers: what a core-only install gives.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import venv
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tests.helpers import REPO, script_env

from lab import extras

pytestmark = pytest.mark.slow


def core_distributions() -> set[str]:
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


def link_tree(site: Path, target: Path, keep: set[PurePosixPath], drop: set[PurePosixPath], at: PurePosixPath) -> None:
    """Link into `target` the entries of `site` under which `keep` has files: a whole folder when none of `drop`'s
    files is inside it, else a real folder whose entries are linked one level down (namespace folders such as
    hydra_plugins/ and nvidia/ hold several distributions' files). `drop`: those files and all their folders."""
    for name in sorted({p.parts[len(at.parts)] for p in keep if len(p.parts) > len(at.parts)}):
        path = at / name
        if path not in drop:
            (target / path).symlink_to(site / path)
        else:
            (target / path).mkdir()
            link_tree(site, target, {p for p in keep if p.parts[: len(path.parts)] == path.parts}, drop, path)


@pytest.fixture(scope="module")
def core_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("core-env")
    venv.create(root, with_pip=False)
    target = Path(
        subprocess.check_output(
            [root / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    core = core_distributions()
    assert "optuna" not in core and "torch" in core
    site = Path(importlib.metadata.distribution("torch").locate_file(""))  # this run's site-packages
    keep, drop = set(), set()
    for dist in importlib.metadata.distributions():
        if Path(dist.locate_file("")) != site:  # e.g. an egg-info in src/, which PYTHONPATH brings anyway
            continue
        files = {PurePosixPath(str(f)) for f in dist.files or [] if not str(f).startswith("..")}
        (keep if canonicalize_name(dist.metadata["Name"]) in core else drop).update(files)
    dropped = {folder for file in drop - keep for folder in (file, *file.parents)}
    link_tree(site, target, keep, dropped, PurePosixPath())
    return root / "bin" / "python"


def run(python: Path, script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = script_env() | {"WANDB_MODE": "offline"}
    return subprocess.run(
        [str(python), str(REPO / "scripts" / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_core_alone_trains_evaluates_and_exports_pt2(core_python: Path, tmp_path: Path) -> None:
    isolated = subprocess.run([core_python, "-c", "import optuna"], capture_output=True, text=True)
    assert "No module named 'optuna'" in isolated.stderr  # the extras are really absent
    train = run(core_python, "train.py", "debug=fast", f"hydra.run.dir={tmp_path}/train", cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "Error importing" not in train.stderr  # Hydra's plugin scan finds no launcher plugin half-installed
    ckpt = tmp_path / "train" / "checkpoints" / "best.pt"
    evaluate = run(core_python, "eval.py", f"ckpt_path={ckpt}", f"hydra.run.dir={tmp_path}/eval", cwd=tmp_path)
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    export = run(
        core_python,
        "export.py",
        f"ckpt_path={ckpt}",
        "export.formats=[pt2]",
        f"hydra.run.dir={tmp_path}/x",
        cwd=tmp_path,
    )
    assert export.returncode == 0 and (tmp_path / "x" / "model.pt2").is_file(), export.stderr[-3000:]
    doctor = subprocess.run([core_python, REPO / "scripts" / "doctor.py"], capture_output=True, text=True, cwd=tmp_path)
    assert "extras    not installed: data, dev, export, pretrained, slurm, sweeps, trackers" in doctor.stdout, (
        doctor.stdout
    )


# one of each mechanism: an option's `requires` (model=timm and the extensions' options are the same, tested
# in-process by test_packaging and their tests), a sweeper's setup, a launcher whose plugin is missing, an entry
# config's own check
@pytest.mark.parametrize(
    ("script", "args", "extra"),
    [
        ("train.py", ["logger=mlflow"], "trackers"),
        ("train.py", ["-m", "hparams_search=optuna"], "sweeps"),
        ("train.py", ["-m", "hydra/launcher=slurm", "seed=1,2"], "slurm"),
        ("export.py", ["ckpt_path=/some/best.pt"], "export"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_an_option_of_a_missing_extra_is_refused_before_any_write(core_python, tmp_path, script, args, extra) -> None:
    proc = run(
        core_python, script, *args, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert f"make install EXTRAS={extra}" in line and f"-e '.[{extra}]'" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir, no sweep dir
