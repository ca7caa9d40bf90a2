"""A multi-layer perceptron on flattened inputs (pixels or table rows), the fastest baseline.

No BatchNorm on purpose, so a sample's outputs never depend on the rest of its batch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import nn


def make_mlp(in_features: int, hidden_dims: list[int], num_classes: int, dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for hidden in hidden_dims:
        layers += [nn.Linear(width, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout)]
        width = hidden
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def build_mlp(cfg: Any, meta: Mapping[str, Any]) -> nn.Module:
    # Sized from meta, not with Lazy modules, so parameter counts and torchinfo work before any forward.
    in_features = math.prod(int(d) for d in meta["input_shape"])
    return make_mlp(in_features, [int(h) for h in cfg.hidden_dims], int(meta["num_outputs"]), float(cfg.dropout))
