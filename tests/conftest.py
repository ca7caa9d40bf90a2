"""Shared fixtures. Importing ``helpers`` imports ``lab.config`` before any test composes a config: that import
registers the schemas in Hydra's ConfigStore, which every conf/<group>/*.yaml extends."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from omegaconf import DictConfig

from helpers import REPO, compose_config

ComposeFn = Callable[..., DictConfig]
# a developer's .env (tracker credentials) must not reach the tests: they expect offline wandb, as on CI
os.environ["NO_DOTENV"] = "1"


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Every test starts with the environment the session started with. Code under test writes os.environ itself
    (SLURM's variables become RANK/WORLD_SIZE, a sweep job's CUDA_VISIBLE_DEVICES), and a later test in the same
    xdist worker would then believe it runs under torchrun; which tests share a worker depends on the scheduling."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def compose() -> ComposeFn:
    """``compose(overrides=(), config_name="train")`` -> the composed (not yet validated) DictConfig.

    Each call runs inside ``hydra.initialize_config_dir``, so no global Hydra state outlives it.
    """
    return compose_config


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
