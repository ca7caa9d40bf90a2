"""Shared fixtures. Importing ``helpers`` imports ``lab.config`` before any test composes a config: that import
registers the schemas in Hydra's ConfigStore, which every conf/<group>/*.yaml extends."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from helpers import REPO, compose_config

ComposeFn = Callable[..., DictConfig]
# a developer's .env (tracker credentials) must not reach the tests: they expect offline wandb, as on CI
os.environ["NO_DOTENV"] = "1"


@pytest.fixture
def compose() -> ComposeFn:
    """``compose(overrides=(), config_name="train")`` -> the composed (not yet validated) DictConfig.

    Each call runs inside ``hydra.initialize_config_dir``, so no global Hydra state outlives it.
    """
    return compose_config


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
