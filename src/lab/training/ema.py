"""An exponential moving average of the model's weights (trainer.ema.decay), kept beside the model it follows.

After every `every_n_steps`-th optimizer step: ``ema = decay * ema + (1 - decay) * weights`` for the trainable
parameters, in one fused ``torch._foreach_lerp_`` on the device (no host sync), and the buffers (BatchNorm running
statistics) copied as they are. Frozen parameters never change, so their copy needs no update.

Validation scores ``module`` (the averaged copy) as ``val/<metric>``, best.pt is chosen by it and holds it as its
``model``, so eval, export and infer use it unchanged; the optimizer's own weights are scored too, as
``val_raw/<metric>``, to show what the average buys. Checkpoints keep those weights under ``raw_model`` to resume
from (``lab.training.state``). Under DDP every rank holds the same parameters and so keeps the same average; FSDP shards
them and is refused at configuration time (``lab.workflows.train_extras.check``).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from lab.checkpointing import load_model_state


class EMA:
    def __init__(self, model: nn.Module, decay: float, every_n_steps: int = 1) -> None:
        if not 0 < decay < 1:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay, self.every_n_steps = decay, every_n_steps
        # a copy of the plain module (no DDP, no torch.compile): evaluated as it is, in eval mode, without autograd
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        pairs = [(a, p) for a, p in zip(self.module.parameters(), model.parameters()) if p.requires_grad]
        self._averaged = [a for a, _ in pairs]
        self._sources = [p for _, p in pairs]
        self._buffers = list(self.module.buffers())
        self._source_buffers = list(model.buffers())

    def describe(self) -> str:
        every = "every optimizer step" if self.every_n_steps == 1 else f"every {self.every_n_steps} optimizer steps"
        return f"EMA of the weights (decay {self.decay}, {every})"

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self._averaged, self._sources, 1.0 - self.decay)
        if self._buffers:
            torch._foreach_copy_(self._buffers, self._source_buffers)

    def on_train_step_end(self, trainer: Any) -> None:
        """The trainer's step hook: a host-side integer test, then the update on the device."""
        if trainer.progress.global_step % self.every_n_steps == 0:
            self.update()

    def state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_model_state(self.module, state)
