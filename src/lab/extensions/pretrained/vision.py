"""Build any torchvision classification model by name, adapted to the data's channels, size and classes.

It starts from random weights or from torchvision's pretrained ones (``model.weights=DEFAULT``)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.errors import ConfigError, UserError
from lab.models.common import image_channels
from lab.models.pretrained import load_matching, read_weights
from lab.network import reachable


class ChannelAdapter(nn.Module):
    """Learned 1x1 projection from the data's channels to the 3 that non-ResNet torchvision models expect.

    With pretrained weights it starts as the channels' mean on every plane, so a grey image looks like its RGB self.

    Named submodules (rather than nn.Sequential) keep state-dict keys readable: ``adapter.*``, ``net.*``.
    """

    def __init__(self, in_channels: int, net: nn.Module) -> None:
        super().__init__()
        self.adapter = nn.Conv2d(in_channels, 3, kernel_size=1)
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.adapter(x))


def classification_archs() -> list[str]:
    import torchvision  # imported on use: ~1 s that mlp/cnn runs need not pay

    return torchvision.models.list_models(module=torchvision.models)


def _arch_kwargs(arch: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Return the constructor arguments some archs need so that forward returns plain logits for this data."""
    if arch in ("googlenet", "inception_v3"):
        # Auxiliary heads make train-mode forward return a namedtuple instead of a logits tensor;
        # init_weights=True is the current default, passed to silence the "default will change" warning.
        return {"aux_logits": False, "init_weights": True}
    if arch.startswith("vit_"):
        return {"image_size": int(meta["input_shape"][-1])}  # positional embeddings are sized for one input size
    return {}


def _resnet_stem(resnet: nn.Module, in_channels: int, small_input: bool) -> None:
    """Replace the ResNet stem in place, for new input channels and/or small images.

    The CIFAR-style stem is a 3x3 stride-1 conv without max-pool. The usual 7x7/2 conv + max-pool would shrink a
    32 px image to 8 px before the first residual block."""
    old: Any = resnet.conv1  # a Conv2d; Any because torch types its attributes unlike its arguments
    if small_input:
        resnet.conv1 = nn.Conv2d(in_channels, old.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
        resnet.maxpool = nn.Identity()
    elif in_channels != old.in_channels:
        resnet.conv1 = nn.Conv2d(
            in_channels,
            old.out_channels,
            kernel_size=old.kernel_size,
            stride=old.stride,
            padding=old.padding,
            bias=False,
        )


def build_torchvision(cfg: Any, meta: Mapping[str, Any]) -> nn.Module:
    arch = str(cfg.arch)
    archs = classification_archs()
    if arch not in archs:
        # Close spellings first, since a typo is the usual cause, else a few common choices.
        suggestions = difflib.get_close_matches(arch, archs, n=3) or ["resnet18", "mobilenet_v3_small", "vit_b_16"]
        raise ConfigError(
            f"model.arch={arch!r} is not a torchvision classification model; see "
            f"torchvision.models.list_models(module=torchvision.models); e.g. {', '.join(suggestions)}"
        )
    import torchvision
    from torchvision.models import ResNet

    in_channels = image_channels(meta, "torchvision")
    # build for this data's classes, then load the weights around the new head: torchvision refuses pretrained
    # weights with another class count
    net = torchvision.models.get_model(
        arch, weights=None, num_classes=int(meta["num_outputs"]), **_arch_kwargs(arch, meta)
    )
    is_resnet_family = isinstance(net, ResNet)  # also resnext*, wide_resnet*: same stem
    if cfg.small_input and not is_resnet_family:
        raise ConfigError(
            f"model.small_input=true only applies to ResNet-family archs, not {arch!r}; set model.small_input=false"
        )
    if is_resnet_family:
        _resnet_stem(net, in_channels, bool(cfg.small_input))
    pretrained = bool(cfg.weights or cfg.weights_path)
    if pretrained:
        what = f"model.weights_path={cfg.weights_path}" if cfg.weights_path else f"model.weights={cfg.weights}"
        load_matching(net, read_weights(locate_weights(cfg), what), what)
    if is_resnet_family or in_channels == 3:
        return net
    adapted = ChannelAdapter(in_channels, net)
    if pretrained:
        # start each RGB plane as the mean of the data's channels, not a random mix; the projection still learns
        with torch.no_grad():
            adapted.adapter.weight.fill_(1.0 / in_channels)
            assert adapted.adapter.bias is not None  # the adapter has a bias
            adapted.adapter.bias.zero_()
    return adapted


def pretrained_weights(cfg: Any) -> Any:
    """Return the torchvision weights enum member of ``model.arch`` that ``model.weights`` names.

    It accepts DEFAULT, IMAGENET1K_V1 or the full ResNet18_Weights.IMAGENET1K_V1. Null means DEFAULT, which is what
    a weights file of the arch most likely holds."""
    import torchvision

    enum = torchvision.models.get_model_weights(str(cfg.arch))
    name = str(cfg.weights or "DEFAULT").rsplit(".", 1)[-1]
    try:
        return enum[name] if name != "DEFAULT" else enum.DEFAULT
    except KeyError:
        names = ", ".join(["DEFAULT", *enum.__members__])
        raise ConfigError(f"model.weights={cfg.weights} is not a weight of {cfg.arch}; choose one of {names}") from None


def locate_weights(cfg: Any) -> str:
    """Return the local weights file: model.weights_path, else model.weights in torch's hub cache.

    It downloads into the cache when the machine can. Otherwise it raises a UserError with the command that fills
    the cache."""
    if cfg.weights_path:
        if not Path(cfg.weights_path).expanduser().is_file():
            raise UserError(f"model.weights_path={cfg.weights_path}: no such file")
        return str(Path(cfg.weights_path).expanduser())
    from torch.hub import get_dir

    weights = pretrained_weights(cfg)
    path = Path(get_dir()) / "checkpoints" / Path(weights.url).name
    if not path.is_file():
        if not reachable(weights.url):
            raise UserError(
                f"model=torchvision model.weights={cfg.weights}: the file {path} is not in torch's hub cache and this "
                f'machine cannot download it; run `python -c "import torchvision; torchvision.models.get_weight('
                f"'{weights}').get_state_dict()\"` on a machine with a network (a login node) with the same "
                "TORCH_HOME, or set model.weights_path=<file>"
            )
        weights.get_state_dict(progress=False, check_hash=True)  # downloads into the cache
    return str(path)
