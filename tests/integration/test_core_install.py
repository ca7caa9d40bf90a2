"""`make install EXTRAS=` (the core alone) works: training, evaluation and a pt2 export run, and every option that
needs an extra is refused before anything is written, naming the extra to install. The core-only environment is the
`core_python` fixture (tests/integration/conftest.py); an extension's own options are tried in its tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.helpers import REPO, script_env

pytestmark = pytest.mark.slow


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


# one of each mechanism of the core: an option's `requires` (an extension's options are the same, tested by its own
# tests; in-process by test_packaging), an entry config's own check
@pytest.mark.parametrize(
    ("script", "args", "extra"),
    [
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
