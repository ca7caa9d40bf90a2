"""model=timm: any architecture of timm's ``create_model`` by name, pretrained from a local file, the Hugging Face
cache or the hub.

Where the weights come from is settled by :func:`locate_weights` before a run writes anything, so a compute node
without a network stops at once with the command that fetches them, not after a minute of download retries.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

from torch import nn

from lab.errors import ConfigError, UserError
from lab.models.common import image_channels
from lab.models.pretrained import load_matching, reachable, read_weights

# the file names timm asks the hub for, in its order
_HUB_FILES = ("model.safetensors", "open_clip_pytorch_model.bin", "pytorch_model.bin")


def _timm() -> Any:
    import timm  # imported on use: ~1 s, paid only by runs of model=timm

    return timm


def pretrained_cfg(arch: str) -> Any:
    """timm's pretrained config of `arch` (``resnet50`` or ``resnet50.a1_in1k``): its weights' source and the
    preprocessing they were trained with; a ConfigError for an unknown name."""
    timm = _timm()
    if not timm.is_model(arch.split(".", 1)[0]):
        names = timm.list_models()
        close = difflib.get_close_matches(arch, names, n=3) or ["resnet18", "convnext_tiny", "vit_small_patch16_224"]
        raise ConfigError(f"model.arch={arch!r} is not a timm model (timm.list_models()); e.g. {', '.join(close)}")
    cfg = timm.models.get_pretrained_cfg(arch)
    if cfg is None:
        raise ConfigError(
            f"model.arch={arch!r}: timm knows no pretrained weights by that tag; see timm.list_pretrained()"
        )
    return cfg


def locate_weights(cfg: Any) -> str | None:
    """The local file timm loads `cfg`'s pretrained weights from (model.weights_path, or the Hugging Face cache),
    None when timm may download them, or a UserError naming the cache and the command that fills it."""
    if cfg.weights_path:
        if not os.path.isfile(os.path.expanduser(cfg.weights_path)):
            raise UserError(f"model.weights_path={cfg.weights_path}: no such file")
        return os.path.expanduser(cfg.weights_path)
    pretrained = pretrained_cfg(cfg.arch)
    from huggingface_hub import constants, try_to_load_from_cache

    repo = pretrained.hf_hub_id
    if repo:
        for filename in _HUB_FILES:
            cached = try_to_load_from_cache(repo, filename)
            if isinstance(cached, str):
                return cached
    if not constants.HF_HUB_OFFLINE and reachable(constants.ENDPOINT if repo else pretrained.url):
        return None
    source = f"hub repo {repo}" if repo else pretrained.url
    fetch = (
        f"hf download {repo}"
        if repo
        else f"python -c \"import timm; timm.create_model('{cfg.arch}', pretrained=True)\""
    )
    raise UserError(
        f"model=timm model.arch={cfg.arch}: its pretrained weights ({source}) are not in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}) and this machine cannot download them; run `{fetch}` on a machine with a "
        "network (a login node) with the same HF_HOME, or set model.weights_path=<file>, or model.pretrained=false"
    )


def build_timm(cfg: Any, meta: Mapping[str, Any]) -> nn.Module:
    in_chans = image_channels(meta, "timm")
    pretrained_cfg(cfg.arch)  # the unknown-name error, before timm's own
    kwargs: dict[str, Any] = {
        "num_classes": int(meta["num_outputs"]),
        "in_chans": in_chans,
        "drop_rate": float(cfg.drop_rate),
        "drop_path_rate": float(cfg.drop_path_rate),
    }
    if cfg.pretrained and not cfg.weights_path:
        # timm's own loader for its published weights: it drops the classifier when num_classes differs, adapts
        # the first convolution to in_chans and converts older layouts; a cached file is passed by path, so
        # nothing is looked up on the network
        file = locate_weights(cfg)
        kwargs.update(pretrained=True, pretrained_cfg_overlay={"file": file} if file else None)
    try:
        model = _timm().create_model(cfg.arch, **kwargs)
    except (RuntimeError, ValueError, KeyError) as err:
        raise UserError(f"model=timm model.arch={cfg.arch}: timm could not build it ({err})") from err
    if cfg.pretrained and cfg.weights_path:
        # your own file (a fine-tuned model, weights copied from elsewhere): everything that fits is loaded,
        # including a head of the same class count, which timm's loader would drop
        what = f"model.weights_path={cfg.weights_path}"
        load_matching(model, read_weights(locate_weights(cfg) or cfg.weights_path, what), what)
    return model
