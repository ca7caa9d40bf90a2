"""Constants and small helpers shared by the test suites (importable as ``helpers``: pytest puts tests/ on sys.path
because tests/conftest.py lives there)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import lab.config  # noqa: F401  (registers the structured-config schemas every conf/<group>/*.yaml extends)

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"
TRAIN_SCRIPT = REPO / "scripts" / "train.py"
PYTHON = sys.executable

# Config groups whose options are files in conf/<group>/*.yaml.
GROUPS = ("data", "model", "optimizer", "scheduler", "precision", "dist", "trainer", "debug", "experiment")


def compose_config(overrides: Sequence[str] = (), config_name: str = "train") -> DictConfig:
    """Compose conf/<config_name>.yaml like the entry scripts do; Hydra's global state is cleared afterwards."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=False)


def group_options(group: str) -> list[str]:
    """The options of one config group, from the files on disk (a new conf/<group>/x.yaml is picked up)."""
    return sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))


def script_env() -> dict[str, str]:
    """Environment for running an entry script in a subprocess: Hydra's short error format, no colour codes."""
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env
