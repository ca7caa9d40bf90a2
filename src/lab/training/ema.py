"""Keep an exponential moving average of the model's weights in a copy of the model (`callback=ema`).

One fused `torch._foreach_lerp_` of the trainable parameters per update, with no host sync; buffers (BatchNorm
statistics) are copied as they are. For validation the average swaps values with the model in place, so the DDP
and compiled views score it too: `val/<metric>` and best.pt are the average's, `val_raw/<metric>` the optimizer's
own weights, which checkpoints keep as `raw_model` for a resume. FSDP shards the weights, so it is refused at config
time (`EMAConfig.conflict`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from lab.checkpointing import load_model_state
from lab.training.callbacks import Callback


class EMA(Callback):
    def __init__(self, model: nn.Module, decay: float, every_n_steps: int = 1) -> None:
        self.decay, self.every_n_steps = decay, every_n_steps
        # a copy of the plain module (no DDP or torch.compile), evaluated as it is, in eval mode, without autograd
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        pairs = [(a, p) for a, p in zip(self.module.parameters(), model.parameters()) if p.requires_grad]
        self._averaged: list[torch.Tensor] = [a for a, _ in pairs]
        self._sources: list[torch.Tensor] = [p for _, p in pairs]
        self._buffers = list(self.module.buffers())
        self._source_buffers = list(model.buffers())

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self._averaged, self._sources, 1.0 - self.decay)
        if self._buffers:
            torch._foreach_copy_(self._buffers, self._source_buffers)

    @torch.no_grad()
    def swap(self) -> None:
        """Swap the values of the average and the model's tensors (parameters and buffers) in place."""
        averaged, followed = self._averaged + self._buffers, self._sources + self._source_buffers
        held = torch._foreach_mul(followed, 1)  # a copy: _foreach_copy_ reads and writes in one pass
        torch._foreach_copy_(followed, averaged)
        torch._foreach_copy_(averaged, held)

    def on_train_step_end(self, trainer: Any) -> None:
        """Update the average every `every_n_steps` steps. The check reads a host integer, so it costs no sync."""
        if trainer.progress.global_step % self.every_n_steps == 0:
            self.update()

    def on_validation_start(self, trainer: Any) -> None:
        self.swap()  # val/ scores the average

    def on_validation_end(self, trainer: Any, metrics: dict[str, float], epoch: int) -> None:
        self.swap()  # the optimizer's own weights back in the model, scored beside the average
        raw = trainer.score(trainer.val_loader)
        metrics.update({f"val_raw/{name}": value for name, value in raw.items()})

    def on_save_checkpoint(self, trainer: Any, checkpoint: dict[str, Any]) -> None:
        """Store the validated average as `model`, which eval, export and infer load. A resume loads `raw_model`."""
        trainer.parallel.sync_buffers(self.module)  # rank 0's BatchNorm statistics, as for the model
        average = trainer.state.option.checkpoint_state(trainer.model, self.state_dict())["model"]  # as the weights
        checkpoint["raw_model"], checkpoint["model"] = checkpoint["model"], average

    def on_load_checkpoint(self, trainer: Any, checkpoint: dict[str, Any]) -> None:
        """Continue the average from the checkpoint's `model`: an EMA run's average, or the resumed weights of a
        run without EMA. A sharded checkpoint has no `model`, so take the weights already loaded into the model."""
        saved = "model" in checkpoint and trainer.state.option.restore_state(trainer.model, checkpoint)
        self.load_state_dict(saved or trainer.model.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_model_state(self.module, state)
