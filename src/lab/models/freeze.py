"""model.freeze: parameters whose names match fnmatch patterns (`backbone.*`) stop training.

They get `requires_grad=False`. The optimizer leaves them out (`lab.optim.optimizers.parameter_groups` takes trainable
parameters only), DDP does not reduce them, and no gradient is computed for them. A normalisation layer whose
weights are all frozen also keeps its running statistics (`train_mode` leaves it in eval mode). Otherwise a frozen
pretrained backbone would drift to the new data's batch statistics under weights that never adapt to them.
"""

from __future__ import annotations

import logging
from fnmatch import fnmatchcase
from typing import Protocol

from torch import nn

from lab.errors import ConfigError

log = logging.getLogger(__name__)
BACKBONE = "backbone"  # model.freeze=[backbone]: all but the classifier


class ModelOption(Protocol):
    """What freezing reads of a model's option, named here because the config layer sits above the models."""

    freeze: list[str]

    def head(self, model: nn.Module) -> nn.Module | None: ...


def freeze(model: nn.Module, option: ModelOption) -> list[str]:
    """Freeze the parameters that match `option.freeze` and return their names.

    The pattern `backbone` means every parameter but the classifier's (`head_parameters`). A pattern that matches
    nothing, or patterns that leave nothing to train, raise ConfigError naming the model's top-level modules."""
    patterns, given = list(option.freeze), list(option.freeze)
    if not patterns:
        return []
    named = dict(model.named_parameters())
    if BACKBONE in patterns:
        head = set(head_parameters(model, option, f"model.freeze=[{BACKBONE}]"))
        patterns = [p for p in patterns if p != BACKBONE] + [n for n in named if n not in head]
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in named):
            top = _top_level(model) or ["(none)"]
            raise ConfigError(
                f"model.freeze pattern {pattern!r} matches no parameter of the model; its top-level modules are "
                f"{', '.join(top)} (patterns match parameter names: model.freeze=[{top[0]}.*] freezes {top[0]})"
            )
    frozen = [name for name in named if any(fnmatchcase(name, pattern) for pattern in patterns)]
    if len(frozen) == len(named):
        raise ConfigError(
            f"model.freeze={given} freezes every parameter, so nothing would train; "
            f"name only the parts to keep fixed (top-level modules: {', '.join(_top_level(model))})"
        )
    for name in frozen:
        named[name].requires_grad_(False)
    values = sum(named[name].numel() for name in frozen)
    log.info("model.freeze=%s: %d parameter tensors (%s values) frozen", given, len(frozen), f"{values:,}")
    return frozen


def _top_level(model: nn.Module) -> list[str]:
    """Return the names a pattern can start with: top-level submodules and the model's own parameters."""
    names = [name for name, child in model.named_children() if any(True for _ in child.parameters())]
    return names + [name for name, _ in model.named_parameters(recurse=False)]


def train_mode(model: nn.Module) -> None:
    """Call `model.train()` but keep fully frozen norm layers in eval mode, on their trained running statistics."""
    model.train()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            params = list(module.parameters())
            if params and not any(p.requires_grad for p in params):
                module.eval()


def head_parameters(model: nn.Module, option: ModelOption, key: str) -> list[str]:
    """Return the names of the classifier's parameters, the layer `option.head` picks (by default the last Linear)."""
    named = {id(p): n for n, p in model.named_parameters()}
    head = option.head(model)
    if head is None or not any(True for _ in head.parameters()):
        raise ConfigError(
            f"{key}: {type(model).__name__} has no classifier layer (no nn.Linear) to tell its head by; "
            "name the parameters with patterns instead"
        )
    return [named[id(p)] for p in head.parameters() if id(p) in named]
