"""Muon on the hidden weight matrices, AdamW on everything else, as one torch optimizer.

Muon takes the 2-D weights of the model's body (see `split`). AdamW takes the rest:
  - the embeddings: 2-D, but a lookup table, so orthogonalising their update makes no sense. A tied output
    projection is the embedding itself.
  - the head named by ``ModelConfig.head``: its update shapes the logits, which Muon's equal singular values
    would not suit.
  - norms and biases (1-D).
  - convolution kernels (4-D): ``torch.optim.Muon`` takes 2-D parameters only, and a flattened kernel would break
    under trainer.channels_last, whose kernels are not contiguous in that order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lab.config.models import ModelConfig


def hidden_matrices(model: nn.Module, model_option: ModelConfig) -> set[int]:
    """Return the ids of the parameters Muon updates: every 2-D weight outside the embeddings and the head."""
    head = model_option.head(model)
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)]
    elsewhere = {id(p) for module in [*embeddings, *([head] if head else [])] for p in module.parameters()}
    return {id(p) for p in model.parameters() if p.ndim == 2 and id(p) not in elsewhere}


def split(groups: list[dict[str, Any]], hidden: set[int], lr: float, adamw_lr: float) -> list[dict[str, Any]]:
    """Split each of the core's groups into a Muon part (`hidden` parameters at lr) and an AdamW part (at adamw_lr).

    The core's groups differ in weight decay and fine-tuning's lr multiplier, which both parts keep. Muon groups
    come first, so train/lr (the first group's lr) is Muon's."""
    muon, adamw = [], []
    for group in groups:
        scale = group.get("lr", lr) / lr
        mine = [p for p in group["params"] if id(p) in hidden]
        if mine:
            muon.append({**group, "params": mine, "lr": lr * scale, "muon": True})
        rest = [p for p in group["params"] if id(p) not in hidden]
        adamw.append({**group, "params": rest, "lr": adamw_lr * scale, "muon": False})
    return muon + adamw


class MuonAdamW(torch.optim.Optimizer):
    """One optimizer: torch.optim.Muon steps the groups marked ``muon``, torch.optim.AdamW the others.

    Both work on this optimizer's own group dicts, so the schedule's lr reaches them and the GradScaler unscales
    every gradient. Both keep their state in its ``state``, so torch's own ``state_dict``/``load_state_dict`` resume
    exactly."""

    def __init__(self, groups: list[dict[str, Any]], muon: dict[str, Any], adamw: dict[str, Any]) -> None:
        super().__init__(groups, {})
        self.options = {True: muon, False: adamw}
        self._bind()

    def _bind(self) -> None:
        """Build each algorithm over its groups, sharing this optimizer's dicts and state; rerun after a load."""
        kinds = {True: torch.optim.Muon, False: torch.optim.AdamW}
        self.parts: list[torch.optim.Optimizer] = []
        for is_muon, kind in kinds.items():
            groups = [group for group in self.param_groups if group["muon"] is is_muon]
            if groups:  # a convnet has no hidden matrices for Muon
                part = kind(groups, **self.options[is_muon])
                part.state = self.state
                self.parts.append(part)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self.parts:
            part.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._bind()


def describe(model: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """Describe the split in one line: how many tensors and values each algorithm updates.

    It also names the 2-D-or-more weights AdamW takes (embeddings, head, conv kernels), the exceptions worth seeing."""
    names = {id(p): name for name, p in model.named_parameters()}
    kinds: dict[bool, list[nn.Parameter]] = {True: [], False: []}
    for group in optimizer.param_groups:
        kinds[group["muon"]] += group["params"]

    def count(params: list[nn.Parameter]) -> str:
        return f"{len(params)} tensors ({sum(p.numel() for p in params):,} values)"

    matrices = ", ".join(names[id(p)] for p in kinds[False] if p.ndim >= 2) or "none"
    line = f"optimizer=muon: Muon on {count(kinds[True])}, AdamW on {count(kinds[False])}; AdamW's weights: {matrices}"
    if not kinds[True]:
        line += " (this model has no hidden weight matrix: Muon updates nothing, conv kernels go to AdamW)"
    return line
