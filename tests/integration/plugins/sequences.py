"""A fork's sequence classifier: (N, T, F) inputs, each step encoded and the steps averaged, so any length T runs; its
data, and no core file edited. Exported with `export.dynamic_dims=[0,1]`, the exported model and infer take
sequences of any length."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from lab.config import DataConfig, ModelConfig, register

STEPS, FEATURES, CLASSES = 12, 4, 3


@dataclass
class SequenceRows(DataConfig):
    num_samples: int = 96

    def build(self):
        from lab.data.common import DataModule

        gen = torch.Generator().manual_seed(self.split_seed)
        x = torch.randn(self.num_samples, STEPS, FEATURES, generator=gen)
        y = x.mean(1)[:, :CLASSES].argmax(1)  # the feature whose mean is largest
        n_val = int(self.num_samples * self.val_fraction)
        splits = [torch.utils.data.TensorDataset(x[a:b], y[a:b]) for a, b in ((n_val, None), (0, n_val))]
        meta = {"input_shape": [STEPS, FEATURES], "num_outputs": CLASSES, "num_classes": CLASSES}
        return DataModule(splits[0], splits[1], None, meta)


class MeanOfSteps(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.step, self.head = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU()), nn.Linear(hidden, CLASSES)

    def forward(self, x):
        return self.head(self.step(x).mean(1))


@dataclass
class SequenceNet(ModelConfig):
    hidden: int = 16

    def build(self, meta):
        return MeanOfSteps(self.hidden)


register()
