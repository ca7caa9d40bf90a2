"""build_data(reuse=True): a sweep's consecutive jobs with the same data config share its splits."""

from hydra import compose, initialize_config_dir

from helpers import REPO
from lab.config import options
from lab.data.datasets import build as build_data


def _data_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return options.instantiate("data", compose("train", overrides=list(overrides)).data)


def test_the_same_data_config_is_built_once_and_a_changed_one_again():
    cfg = _data_cfg()
    first = build_data(cfg, reuse=True)
    again = build_data(cfg, reuse=True)
    assert again.train is first.train and again.val is first.val  # not read and split again
    again.meta["num_classes"] = -1  # one job changing its meta leaves the next one's alone
    assert build_data(cfg, reuse=True).meta["num_classes"] == 10
    changed = build_data(_data_cfg("data.split_seed=1"), reuse=True)
    assert changed.train is not first.train
    assert build_data(cfg).train is not build_data(cfg).train  # without reuse: always built anew
