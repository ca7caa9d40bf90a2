"""A small BatchNorm convnet for any input size >= 1 px, with optional gradient checkpointing."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def conv_block(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),  # BatchNorm's shift makes a bias redundant
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
        # ceil_mode halves the map down to 1x1 and then keeps it there, so 8 px and 224 px inputs work with
        # the same architecture.
        nn.MaxPool2d(2, ceil_mode=True),
    )


@contextmanager
def _preserved_buffers(module: nn.Module) -> Iterator[None]:
    """Undo the second update of BatchNorm's running statistics that recomputation in backward makes."""
    saved = [(buffer, buffer.clone()) for buffer in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, copy in saved:
                buffer.copy_(copy)


class SmallCNN(nn.Module):
    def __init__(
        self, in_channels: int, channels: list[int], num_classes: int, dropout: float, grad_checkpointing: bool = False
    ) -> None:
        super().__init__()
        widths = [in_channels, *channels]
        self.blocks = nn.ModuleList(conv_block(cin, cout) for cin, cout in itertools.pairwise(widths))
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(channels[-1], num_classes)
        )
        self.grad_checkpointing = grad_checkpointing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Checkpointing only pays off when activations are kept for a backward pass.
        recompute = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            if recompute:
                context_fn = functools.partial(_checkpoint_contexts, block)
                x = checkpoint(block, x, use_reentrant=False, context_fn=context_fn)
            else:
                x = block(x)
        return self.head(x)


def _checkpoint_contexts(block: nn.Module) -> tuple[Any, Any]:
    # (first forward, recomputation in backward)
    return nullcontext(), _preserved_buffers(block)
