"""Pretrained weights (issue 23): model=timm and model=torchvision model.weights from files the tests write, the
preprocessing they give the data, and timm's head and layer groups for the fine-tuning recipes (per-layer learning
rates, a frozen backbone). No network: a "pretrained" file is a randomly initialised model saved by the test."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from lab import models
from lab.errors import UserError
from lab.extensions.pretrained.options import TimmConfig, TorchvisionConfig
from lab.optim import build_optimizer
from lab.optim.options import SGDConfig

timm = pytest.importorskip("timm")

META = {"input_shape": [3, 32, 32], "num_outputs": 3, "num_classes": 3, "in_channels": 3, "image_size": 32}
GREY = {**META, "input_shape": [1, 32, 32], "in_channels": 1}


def saved(tmp_path, model: nn.Module, name: str = "weights.pth") -> str:
    path = tmp_path / name
    torch.save(model.state_dict(), path)
    return str(path)


def test_timm_weights_file_is_loaded_whole_when_the_head_fits(tmp_path):
    torch.manual_seed(0)
    source = timm.create_model("test_resnet", num_classes=3).eval()
    model = models.build(TimmConfig(arch="test_resnet", weights_path=saved(tmp_path, source)), META).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), source(x))  # the file's model, logits and all


def test_a_1000_class_file_gives_a_new_head_and_a_grey_stem(tmp_path, caplog):
    torch.manual_seed(0)
    source = timm.create_model("test_resnet")  # ImageNet's 1000 classes, RGB
    with caplog.at_level(logging.INFO, logger="lab.extensions.pretrained.timm_model"):
        model = models.build(TimmConfig(arch="test_resnet", weights_path=saved(tmp_path, source)), GREY)
    own, theirs = model.state_dict(), source.state_dict()
    assert own["fc.weight"].shape == (3, theirs["fc.weight"].shape[1])  # re-initialised for 3 classes
    stem = "conv1.0.weight"
    assert torch.equal(own[stem], theirs[stem].sum(dim=1, keepdim=True))  # RGB filters summed for grey images
    same = [k for k in own if k not in ("fc.weight", "fc.bias", stem)]
    assert same and all(torch.equal(own[k], theirs[k]) for k in same)
    assert "loaded by timm; a new head for 3 classes (the file's has 1000)" in caplog.text


def test_offline_without_the_weights_is_one_line_naming_the_cache_and_the_fix(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as err:
        TimmConfig(arch="test_resnet").locate_weights()
    message = str(err.value)
    assert "\n" not in message and "model.arch=test_resnet" in message
    assert "hf download timm/test_resnet.r160_in1k" in message and "model.weights_path=<file>" in message


def test_cached_hub_weights_are_read_from_the_cache_without_the_network(tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "models--timm--test_resnet.r160_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc")
    (repo / "snapshots" / "abc").mkdir(parents=True)
    torch.manual_seed(0)
    source = timm.create_model("test_resnet", num_classes=3)
    from safetensors.torch import save_file

    save_file(source.state_dict(), str(repo / "snapshots" / "abc" / "model.safetensors"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = models.build(TimmConfig(arch="test_resnet"), {**META, "num_outputs": 5})
    own = model.state_dict()
    assert torch.equal(own["conv1.0.weight"], source.state_dict()["conv1.0.weight"])
    assert own["fc.weight"].shape[0] == 5  # timm's loader dropped the classifier of another class count


def test_a_vit_file_is_resampled_to_the_data_size(tmp_path):
    torch.manual_seed(0)
    source = timm.create_model("test_vit", num_classes=3)  # position embeddings for 160 px
    model = models.build(
        TimmConfig(arch="test_vit", weights_path=saved(tmp_path, source)),
        {**META, "image_size": 48, "input_shape": [3, 48, 48]},
    )
    assert model(torch.randn(1, 3, 48, 48)).shape == (1, 3)
    assert torch.equal(model.state_dict()["blocks.0.attn.qkv.weight"], source.state_dict()["blocks.0.attn.qkv.weight"])


def test_a_checkpoint_rebuilds_without_the_pretrained_file(tmp_path):
    option = TimmConfig(arch="test_resnet", weights_path=str(tmp_path / "moved-away.pth"), init_from="gone.pt")
    architecture = option.for_checkpoint()
    assert (architecture.pretrained, architecture.weights_path, architecture.init_from) == (False, None, None)
    models.build(architecture, META)  # nothing read


def test_timms_pretrained_config_is_the_preprocessing_the_data_takes():
    # test_efficientnet's: 160 px, crop 0.95, bicubic, ImageNet statistics (lab.models.common.adopt_preprocessing)
    assert TimmConfig(arch="test_efficientnet").preprocessing() == {
        "image_size": 160,
        "crop_pct": 0.95,
        "interpolation": "bicubic",
        "mean": pytest.approx([0.485, 0.456, 0.406]),
        "std": pytest.approx([0.229, 0.224, 0.225]),
    }
    assert TimmConfig(arch="test_resnet", pretrained=False).preprocessing() is None  # random init: the data's own


def test_torchvision_weights_load_around_a_new_head(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    source = torchvision.models.mobilenet_v3_small()  # 1000 classes
    option = TorchvisionConfig(arch="mobilenet_v3_small", weights="IMAGENET1K_V1", weights_path=saved(tmp_path, source))
    model = models.build(option, META)
    own, theirs = model.state_dict(), source.state_dict()
    head = {"classifier.3.weight", "classifier.3.bias"}
    assert own["classifier.3.weight"].shape[0] == 3
    assert all(torch.equal(own[k], theirs[k]) for k in own if k not in head)
    # its preprocessing is the weights' transforms: resize 256, centre crop 224, ImageNet statistics
    pre = option.preprocessing()
    assert pre["image_size"] == 224 and pre["crop_pct"] == 224 / 256 and pre["interpolation"] == "bilinear"
    assert pre["mean"] == pytest.approx([0.485, 0.456, 0.406])


def test_torchvision_weights_come_from_torchs_cache_or_one_line(tmp_path, monkeypatch):
    import torchvision

    from lab.extensions.pretrained import vision

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(vision, "reachable", lambda url, timeout=3.0: False)  # a compute node: no network
    option = TorchvisionConfig(arch="mobilenet_v3_small", weights="DEFAULT")
    with pytest.raises(UserError) as err:
        option.locate_weights()
    assert "\n" not in str(err.value) and "mobilenet_v3_small-047dcff4.pth is not in torch's hub cache" in str(
        err.value
    )
    cached = tmp_path / "hub" / "checkpoints" / "mobilenet_v3_small-047dcff4.pth"
    cached.parent.mkdir(parents=True)
    torch.save(torchvision.models.mobilenet_v3_small().state_dict(), cached)
    option.locate_weights()  # found in the cache: no network needed
    assert models.build(option, META).classifier[3].out_features == 3


def test_grey_images_reach_torchvision_weights_as_three_equal_planes(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    source = torchvision.models.mobilenet_v3_small(num_classes=3).eval()
    option = TorchvisionConfig(arch="mobilenet_v3_small", weights="DEFAULT", weights_path=saved(tmp_path, source))
    model = models.build(option, GREY).eval()
    grey = torch.randn(2, 1, 32, 32)
    with torch.no_grad():
        assert torch.allclose(model(grey), source(grey.expand(-1, 3, -1, -1)), atol=1e-6)


def test_layer_decay_and_head_lr_scale_set_each_group_learning_rate():
    model = timm.create_model("test_resnet", num_classes=3)
    option = SGDConfig(lr=0.1, layer_decay=0.5, head_lr_scale=10.0)
    optimizer = build_optimizer(option, model, TimmConfig(arch="test_resnet"))
    lr_of = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    named = dict(model.named_parameters())
    # six layer groups (stem, layer1-4, fc): stem 0.5**5, layer4 0.5, the head 1 x head_lr_scale
    assert lr_of[id(named["conv1.0.weight"])] == pytest.approx(0.1 * 0.5**5)
    assert lr_of[id(named["layer4.0.conv1.weight"])] == pytest.approx(0.1 * 0.5)
    assert lr_of[id(named["fc.weight"])] == pytest.approx(0.1 * 10)
    decay_of = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
    assert decay_of[id(named["layer4.0.bn1.weight"])] == 0.0  # norms still undecayed
    assert len(lr_of) == len(named)


def test_freezing_the_backbone_leaves_the_classifier_to_train():
    model = models.build(TimmConfig(arch="test_resnet", pretrained=False, freeze=["backbone"]), META)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["fc.weight", "fc.bias"]
