"""Build any timm architecture by name (model=timm), pretrained from a local file, the Hugging Face cache or the hub.

`locate_weights` settles where the weights come from before a run writes anything. A compute node without a network
then stops at once with the command that fetches them, not after a minute of download retries.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from typing import Any

from torch import nn

from lab.errors import ConfigError, UserError
from lab.models.common import image_channels
from lab.models.pretrained import read_weights
from lab.network import reachable

log = logging.getLogger(__name__)

# the file names timm asks the hub for, in its order
_HUB_FILES = ("model.safetensors", "open_clip_pytorch_model.bin", "pytorch_model.bin")


def _timm() -> Any:
    import timm  # imported on use: ~1 s, paid only by runs of model=timm

    return timm


def check_arch(arch: str) -> None:
    """Raise a ConfigError naming close matches when timm has no architecture `arch`; a tag after a dot is ignored."""
    timm = _timm()
    if not timm.is_model(arch.split(".", 1)[0]):
        names = timm.list_models()
        close = difflib.get_close_matches(arch, names, n=3) or ["resnet18", "convnext_tiny", "vit_small_patch16_224"]
        raise ConfigError(f"model.arch={arch!r} is not a timm model (timm.list_models()); e.g. {', '.join(close)}")


def pretrained_cfg(arch: str) -> Any:
    """Return timm's pretrained config of `arch` (``resnet50`` or ``resnet50.a1_in1k``).

    It holds the weights' source and the preprocessing they were trained with. Raises ConfigError for an unknown
    name or tag."""
    check_arch(arch)
    cfg = _timm().models.get_pretrained_cfg(arch)
    if cfg is None:
        raise ConfigError(
            f"model.arch={arch!r}: timm has no pretrained weights of that name or tag; see timm.list_pretrained(), "
            "or set model.pretrained=false"
        )
    return cfg


def locate_weights(cfg: Any) -> str | None:
    """Return the local file of `cfg`'s pretrained weights: model.weights_path, or the Hugging Face cache.

    Return None when timm may download them. Otherwise raise a UserError naming the cache and the command that
    fills it."""
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
    check_arch(cfg.arch)  # close names, before timm's own error
    kwargs: dict[str, Any] = {
        "num_classes": int(meta["num_outputs"]),
        "in_chans": in_chans,
        "drop_rate": float(cfg.drop_rate),
        "drop_path_rate": float(cfg.drop_path_rate),
    }
    known = _timm().models.get_pretrained_cfg(cfg.arch)
    if known is not None and known.fixed_input_size:
        # ViTs and Swins are built for one input size, so use the data's; timm resamples the pretrained position
        # embeddings to it
        kwargs["img_size"] = int(meta["input_shape"][-1])
    if cfg.pretrained:
        kwargs.update(pretrained=True, pretrained_cfg_overlay=_weights_source(cfg, int(meta["num_outputs"])))
    try:
        model = _timm().create_model(cfg.arch, **kwargs)
    except (RuntimeError, ValueError, KeyError) as err:
        raise UserError(f"model=timm model.arch={cfg.arch}: timm could not build it ({err})") from err
    return model


def _weights_source(cfg: Any, num_classes: int) -> dict[str, Any] | None:
    """Return where timm's own loader reads the weights from (its ``pretrained_cfg_overlay``).

    timm's loader converts older layouts, resamples a ViT's position embeddings, adapts the first convolution to
    in_chans and drops a classifier with another class count. A file of yours (model.weights_path: a state dict,
    a checkpoint of this template, .safetensors) is read here and passed as a state dict with its class count, so a
    head that fits is kept. A cached hub file is passed by path. None means timm downloads it."""
    if not cfg.weights_path:
        file = locate_weights(cfg)
        log.info("model=timm model.arch=%s: pretrained weights from %s", cfg.arch, file or "the hub")
        return {"file": file} if file else None
    what = f"model.weights_path={cfg.weights_path}"
    state = read_weights(locate_weights(cfg) or cfg.weights_path, what)
    known = pretrained_cfg(cfg.arch)
    heads = (known.classifier,) if isinstance(known.classifier, str) else tuple(known.classifier or ())
    rows = next((int(state[f"{h}.weight"].shape[0]) for h in heads if f"{h}.weight" in state), known.num_classes)
    head = "its head kept" if rows == num_classes else f"a new head for {num_classes} classes (the file's has {rows})"
    log.info("%s: %d tensors, loaded by timm; %s", what, len(state), head)
    return {"state_dict": state, "num_classes": rows}
