"""`make install EXTRAS=` (the core alone, the core_python fixture): `model=timm` is refused before anything is
written, naming the extra to install."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import REPO, script_env

pytestmark = pytest.mark.slow


def test_a_core_install_refuses_model_timm_naming_the_extra(core_python: Path, tmp_path: Path) -> None:
    command = [str(core_python), str(REPO / "scripts" / "train.py"), "model=timm", f"hydra.run.dir={tmp_path}/run"]
    proc = subprocess.run(command, cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "model=timm needs timm" in line and "make install EXTRAS=pretrained" in line, line
    assert "-e '.[pretrained]'" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir
