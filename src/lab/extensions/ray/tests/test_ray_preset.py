"""The preset and its keys as Hydra composes them, and the refusals of bad keys (in-process: no Ray started)."""

from __future__ import annotations

import hydra.utils
import pytest
import ray
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers import CONF_DIR
from lab.errors import ConfigError
from lab.extensions.ray.launcher import RayJobs
from lab.extensions.ray.plugins import RayLauncher


def _launcher_node(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=ray", *overrides], return_hydra_config=True)
    return cfg.hydra.launcher


def test_the_preset_targets_the_plugin_and_holds_the_keys() -> None:
    node = _launcher_node("hydra.launcher.num_gpus=2", "+hydra.launcher.runtime_env.env_vars.A=b")
    assert node._target_ == "hydra_plugins.lab_sweepers.extensions.RayLauncher"
    keys = OmegaConf.to_container(node)
    assert keys == {
        "_target_": "hydra_plugins.lab_sweepers.extensions.RayLauncher",
        "address": None,
        "local_cpus": None,
        "local_gpus": None,
        "num_cpus": 1,
        "num_gpus": 2,
        "max_concurrent": None,
        "runtime_env": {"env_vars": {"A": "b"}},
    }
    launcher = hydra.utils.instantiate(node)
    assert isinstance(launcher, RayLauncher)  # the re-exported subclass Hydra registers
    RayJobs(**launcher.keys)  # every key of the preset is one RayJobs takes


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"num_gpus": -1}, "hydra.launcher.num_gpus=-1: a share of a resource, so 0 or more"),
        ({"max_concurrent": 0}, "hydra.launcher.max_concurrent=0: 1 or more, or null (no limit)"),
        (
            {"address": "auto", "local_cpus": 4},
            "hydra.launcher.local_cpus/local_gpus size a local Ray instance, but address=auto joins a cluster, "
            "whose resources are its own: drop them, or set hydra.launcher.address=null",
        ),
    ],
    ids=["negative share", "max_concurrent", "local sizes with a cluster"],
)
def test_bad_keys_are_refused_in_one_line(keys, message) -> None:
    with pytest.raises(ConfigError) as refused:
        RayJobs(**keys)
    assert str(refused.value) == message


def test_an_address_with_no_cluster_is_refused_in_one_line(monkeypatch) -> None:
    """As `ray.init` raises it when no cluster answers. Not run for real: under xdist `auto` would find another
    test's local instance, which Ray's `auto` joins."""

    def init(**_) -> None:
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(ConfigError) as refused:
        RayJobs(address="auto")._connect()
    assert str(refused.value) == (
        "hydra.launcher.address=auto: no Ray cluster there (ConnectionError: Could not find any running Ray "
        "instance.); start one with `ray start --head`, or leave hydra.launcher.address unset for a local instance"
    )
