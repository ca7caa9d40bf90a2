"""Fine-tuning any model: model.init_from (another run's weights), the preprocessing a model option gives the
data, the head's learning rate and layer-wise decay as the model's option names them (ModelConfig.head,
ModelConfig.layer_groups), and frozen BatchNorm layers."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from lab import models
from lab.config import ConfigError
from lab.data.options import ImageFolderConfig
from lab.errors import UserError
from lab.models.common import adopt_preprocessing
from lab.models.freeze import train_mode
from lab.models.options import CNNConfig
from lab.optim import build_optimizer
from lab.optim.options import SGDConfig
from lab.runtime import Precision
from lab.training.evaluation import accumulate_metrics

META = {"input_shape": [3, 32, 32], "num_outputs": 3, "num_classes": 3, "in_channels": 3, "image_size": 32}
# what a pretrained model option (ModelConfig.preprocessing) may ask of the data: 160 px, ImageNet's statistics
PRETRAINED = {
    "image_size": 160,
    "crop_pct": 0.95,
    "interpolation": "bicubic",
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
}


def test_init_from_another_run_loads_all_but_the_head(tmp_path, caplog):
    torch.manual_seed(0)
    ten_classes = models.build(CNNConfig(channels=[8, 16]), {**META, "num_outputs": 10, "num_classes": 10})
    path = tmp_path / "best.pt"
    torch.save({"model": ten_classes.state_dict(), "format_version": 1}, path)
    with caplog.at_level(logging.INFO, logger="lab.models.pretrained"):
        model = models.build(CNNConfig(channels=[8, 16], init_from=str(path)), META)
    own, theirs = model.state_dict(), ten_classes.state_dict()
    mismatched = {k for k in own if own[k].shape != theirs[k].shape}
    assert mismatched and all(torch.equal(own[k], theirs[k]) for k in own if k not in mismatched)
    assert (
        f"model.init_from={path}: {len(own) - len(mismatched)} tensors loaded, {len(mismatched)} re-init" in caplog.text
    )


def test_init_from_a_missing_file_is_refused_before_the_run_writes(tmp_path):
    with pytest.raises(UserError, match=r"model\.init_from=.*no such file"):
        CNNConfig(init_from=str(tmp_path / "nope.pt")).locate_weights()


def test_the_data_takes_the_pretrained_preprocessing_where_its_keys_are_null():
    composed = OmegaConf.structured(ImageFolderConfig(root="x", in_channels=1, interpolation="nearest"))
    data = adopt_preprocessing(composed, PRETRAINED)
    assert composed.image_size is None  # the run's config stays as composed: resume=auto compares it
    assert data.image_size == 160 and data.crop_pct == 0.95
    assert data.interpolation == "nearest"  # set by the user: kept
    assert data.mean == pytest.approx([(0.485 + 0.456 + 0.406) / 3])  # grey images: the colours' mean
    assert adopt_preprocessing(composed, None) is composed  # nothing to take (the default ModelConfig's)


def test_head_lr_scale_finds_the_last_linear_of_any_model():
    model = models.build(CNNConfig(channels=[8]), META)
    optimizer = build_optimizer(SGDConfig(lr=0.01, head_lr_scale=5.0), model, CNNConfig(channels=[8]))
    head = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    scaled = [g for g in optimizer.param_groups if g["lr"] == pytest.approx(0.05)]
    assert {id(p) for g in scaled for p in g["params"]} == {id(p) for p in head.parameters()}


def test_layer_decay_needs_a_model_with_layer_groups():
    option = CNNConfig(channels=[8])
    with pytest.raises(ConfigError, match=r"optimizer\.layer_decay needs a model that names its layers"):
        build_optimizer(SGDConfig(layer_decay=0.7), models.build(option, META), option)


@dataclass
class _Grouped(CNNConfig, abstract=True):
    """A model option that names its model's layer groups and head (ModelConfig's seams), as a fork's may."""

    def layer_groups(self, model: nn.Module) -> list[list[str]] | None:
        return [["blocks.0.0.weight"], ["blocks.1.0.weight"], ["head.3.weight", "head.3.bias"]]

    def head(self, model: nn.Module) -> nn.Module | None:
        return model.blocks[1]  # not the last nn.Linear


def test_layer_decay_and_the_head_are_what_the_model_option_names():
    option = _Grouped(channels=[8, 16])
    model = models.build(option, META)
    optimizer = build_optimizer(SGDConfig(lr=0.1, layer_decay=0.5, head_lr_scale=10.0), model, option)
    name_of = {id(p): name for name, p in model.named_parameters()}
    lr_of = {name_of[id(p)]: group["lr"] for group in optimizer.param_groups for p in group["params"]}
    assert lr_of["blocks.0.0.weight"] == pytest.approx(0.1 * 0.5**2)
    assert lr_of["blocks.1.0.weight"] == pytest.approx(0.1 * 0.5 * 10)  # its group's, times the head's scale
    assert lr_of["blocks.1.1.weight"] == pytest.approx(0.1 * 10)  # the head's BatchNorm, in no layer group
    assert lr_of["head.3.weight"] == pytest.approx(0.1)  # the last group; not the head the option names
    frozen = models.build(_Grouped(channels=[8, 16], freeze=["backbone"]), META)  # all but the option's head
    assert {n for n, p in frozen.named_parameters() if p.requires_grad} == {
        n for n in lr_of if n.startswith("blocks.1.")
    }


def test_frozen_batchnorm_keeps_its_statistics_and_evaluation_restores_each_mode():
    torch.manual_seed(0)
    model = models.build(CNNConfig(channels=[8, 16], freeze=["blocks.0.*"]), META)
    frozen = [m for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d) and n.startswith("blocks.0")]
    trained = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d) and m not in frozen]
    assert frozen and trained
    before = frozen[0].running_mean.clone()
    train_mode(model)
    assert not frozen[0].training and trained[0].training
    model(torch.randn(4, 3, 32, 32) * 3 + 1).sum().backward()
    assert torch.equal(frozen[0].running_mean, before)  # eval mode: normalised by, and never updating, its stats

    class Sink:
        def update(self, outputs, targets):
            pass

    batch = torch.utils.data.TensorDataset(torch.randn(2, 3, 32, 32), torch.tensor([0, 1]))
    accumulate_metrics(
        model,
        torch.utils.data.DataLoader(batch, batch_size=2),
        Sink(),
        device=torch.device("cpu"),
        precision=Precision("fp32", None, False),
    )
    assert not frozen[0].training and trained[0].training  # each module's mode as it was
