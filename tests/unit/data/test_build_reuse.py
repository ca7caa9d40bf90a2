"""data.build(reuse=True): a sweep's consecutive jobs with the same data config share its splits."""

from hydra import compose, initialize_config_dir

from helpers import REPO
from lab import data
from lab.config import options


def _data_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return options.instantiate("data", compose("train", overrides=list(overrides)).data)


def test_the_same_data_config_is_built_once_and_a_changed_one_again():
    cfg = _data_cfg()
    first = data.build(cfg, reuse=True)
    again = data.build(cfg, reuse=True)
    assert again.train is first.train and again.val is first.val  # not read and split again
    again.meta["num_classes"] = -1  # one job changing its meta leaves the next one's alone
    assert data.build(cfg, reuse=True).meta["num_classes"] == 10
    changed = data.build(_data_cfg("data.split_seed=1"), reuse=True)
    assert changed.train is not first.train
    assert data.build(cfg).train is not data.build(cfg).train  # without reuse: always built anew
