"""A multi-layer perceptron on flattened inputs (pixels or table rows), the fastest baseline.

No BatchNorm on purpose, so a sample's outputs never depend on the rest of its batch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import nn


def build_mlp(cfg: Any, meta: Mapping[str, Any]) -> nn.Sequential:
    # Sized from meta, not with Lazy modules, so parameter counts and torchinfo work before any forward.
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(int(d) for d in meta["input_shape"])
    for hidden in cfg.hidden_dims:
        layers += [nn.Linear(width, int(hidden)), nn.ReLU(inplace=True), nn.Dropout(float(cfg.dropout))]
        width = int(hidden)
    layers.append(nn.Linear(width, int(meta["num_outputs"])))
    return nn.Sequential(*layers)
