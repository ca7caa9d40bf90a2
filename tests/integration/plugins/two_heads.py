"""A fork's model of two outputs (class logits and a box), its data and the task whose loss takes both, as the README's
"Add your own model, dataset or task" writes them, with no core file edited. A fork's modules in src/lab/config are
found by themselves; a test imports this one first (run_script's patch) and it registers its options itself.

`model.returns` picks what the model returns: a tuple (named by the task: logits, boxes), a dict (cls, box: its
keys name them) or, to be refused before training, a dict holding a tuple.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lab.config import DataConfig, ModelConfig, TaskConfig, register
from lab.tasks.base import BaseTask

FEATURES, CLASSES = 8, 3


class Rows(torch.utils.data.Dataset):
    """(features, {"label": class, "box": 4 values}): targets of two kinds, for the two heads."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x, self.label, self.box = x, x[:, :CLASSES].argmax(1), x[:, CLASSES : CLASSES + 4] / 2

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        return self.x[index], {"label": self.label[index], "box": self.box[index]}


@dataclass
class BoxRows(DataConfig):
    num_samples: int = 400

    def build(self):
        from lab.data.common import DataModule

        x = torch.randn(self.num_samples, FEATURES, generator=torch.Generator().manual_seed(self.split_seed))
        n_val = int(self.num_samples * self.val_fraction)
        meta = {"input_shape": [FEATURES], "num_outputs": CLASSES}
        return DataModule(Rows(x[n_val:]), Rows(x[:n_val]), None, meta)


class TwoHeadNet(nn.Module):
    def __init__(self, hidden: int, returns: str) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU())
        self.cls, self.box = nn.Linear(hidden, CLASSES), nn.Linear(hidden, 4)
        self.returns = returns

    def forward(self, x):
        h = self.trunk(x)
        logits, box = self.cls(h), self.box(h)
        if self.returns == "dict":
            return {"cls": logits, "box": box}
        if self.returns == "nested":
            return {"cls": logits, "box": (box, box)}
        return logits, box


@dataclass
class TwoHeads(ModelConfig):
    hidden: int = 32
    returns: str = "tuple"  # tuple | dict | nested

    def build(self, meta):
        return TwoHeadNet(self.hidden, self.returns)


class ClassAndBoxTask(BaseTask):
    output_names = ("logits", "boxes")  # a tuple's names; a dict's keys name its own

    def loss(self, outputs, targets):
        logits, box = outputs.values() if isinstance(outputs, dict) else outputs
        label_loss = F.cross_entropy(logits.float(), targets["label"], reduction="sum")
        return label_loss + F.mse_loss(box.float(), targets["box"], reduction="sum")


@dataclass
class ClassAndBox(TaskConfig):
    monitor: str = "loss"
    mode: str = "min"
    target_type: str = "labels"

    def build(self, meta):
        return ClassAndBoxTask()


register()
