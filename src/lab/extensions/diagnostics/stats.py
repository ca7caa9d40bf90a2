"""Log what each layer does every N optimizer steps, and name the layers that never learn.

Turn it on with ``callback=stats`` and set N with ``callbacks.stats.every_n_steps=N``.

A *layer* is a module that owns parameters directly (``fc1``, ``blocks.0.attn.qkv``; the model's own parameters are
``(model)``). On each statistics step, rank 0 logs to every tracker (``metrics.jsonl`` included):

    stats/grad_norm/<layer>    L2 norm of the layer's gradients (unscaled under fp16 loss scaling)
    stats/weight_norm/<layer>  L2 norm of its parameters
    stats/act_mean/<layer>     mean and (population) standard deviation of its output in the training forward
    stats/act_std/<layer>      passes of that step, averaged over micro-batches

Trackers that keep histograms (wandb) also get ``stats/grads/<layer>`` and ``stats/weights/<layer>``. A layer whose
gradients were exactly zero or absent at every statistics step after the first few gets one warning. It is frozen
by mistake (``requires_grad=False``), unused or detached in forward, or behind dead ReLUs.

Gradients are read in ``on_before_optimizer_step``, before the optimizer zeroes them. Activation hooks are installed
only for the forward passes of statistics steps. Each statistics step syncs with the host once, twice with
histograms. Steps in between cost a modulo each.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import torch
from torch import nn

from lab.training.callbacks import Callback

log = logging.getLogger(__name__)

HISTOGRAM_BINS = 64


class TrainingStats(Callback):
    def __init__(self, model: nn.Module, every_n_steps: int, warn_after: int = 3) -> None:
        self.every, self.warn_after = every_n_steps, warn_after
        self.layers = {
            name or "(model)": module
            for name, module in model.named_modules()
            if next(module.parameters(recurse=False), None) is not None
        }
        self.logged = 0  # statistics steps so far
        self.learning: set[str] = set()  # layers that had a non-zero gradient at some statistics step
        self.warned: set[str] = set()
        self._activations: dict[str, list[torch.Tensor]] = {}
        self._handles: list[Any] = []
        self._watch()  # the first step may be a statistics step, before on_train_step_end runs

    # ------------------------------------------------------------------ Trainer callback hooks
    def on_before_optimizer_step(self, trainer: Any) -> None:
        step = trainer.progress.global_step + 1
        if step % self.every == 0:
            self._log(trainer, step)
        self._unwatch()

    def on_train_step_end(self, trainer: Any) -> None:
        if (trainer.progress.global_step + 1) % self.every == 0:
            self._watch()

    def on_fit_end(self, trainer: Any, summary: dict[str, Any]) -> None:
        self._unwatch()

    # ------------------------------------------------------------------ activations
    def _watch(self) -> None:
        if not self._handles:
            self._handles = [
                module.register_forward_hook(functools.partial(self._record, name))
                for name, module in self.layers.items()
            ]

    def _unwatch(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._activations.clear()

    def _record(self, name: str, module: nn.Module, inputs: Any, output: Any) -> None:
        if not module.training:  # a validation pass between two steps
            return
        while isinstance(output, (tuple, list)) and output:
            output = output[0]
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            std, mean = torch.std_mean(output.detach().float(), correction=0)
            self._activations.setdefault(name, []).append(torch.stack([mean, std]))

    # ------------------------------------------------------------------ one statistics step
    def _log(self, trainer: Any, step: int) -> None:
        grads = {name: _grads(module) for name, module in self.layers.items()}
        zero = torch.zeros((), device=trainer.device)
        grad_norms = [torch.nn.utils.get_total_norm(g) if g else zero for g in grads.values()]
        weight_norms = [torch.nn.utils.get_total_norm(list(m.parameters(recurse=False))) for m in self.layers.values()]
        activations = {name: torch.stack(values).mean(0) for name, values in self._activations.items()}
        values = torch.stack([*grad_norms, *weight_norms, *(a for pair in activations.values() for a in pair)])
        if trainer.scaler.is_enabled():  # fp16 gradients still carry the loss scale here
            values[: len(grad_norms)] /= trainer.scaler.get_scale()
        numbers = iter(values.tolist())  # the one host sync of a statistics step
        metrics = {f"stats/grad_norm/{name}": next(numbers) for name in self.layers}
        metrics |= {f"stats/weight_norm/{name}": next(numbers) for name in self.layers}
        for name in activations:
            metrics[f"stats/act_mean/{name}"], metrics[f"stats/act_std/{name}"] = next(numbers), next(numbers)
        epoch = trainer.progress.epoch + 1
        trainer.tracker.log(metrics, step=step, epoch=epoch)
        if trainer.tracker.keeps_histograms:
            histograms = {f"stats/grads/{n}": g for n, g in grads.items() if g}
            histograms |= {f"stats/weights/{n}": list(m.parameters(recurse=False)) for n, m in self.layers.items()}
            trainer.tracker.log_histograms(_histograms(histograms), step=step)
        self.logged += 1
        self.learning.update(name for name in self.layers if metrics[f"stats/grad_norm/{name}"] != 0)
        if self.logged >= self.warn_after:
            self._warn_still_zero()

    def _warn_still_zero(self) -> None:
        for name, module in self.layers.items():
            if name in self.learning or name in self.warned:
                continue
            self.warned.add(name)
            params = list(module.parameters(recurse=False))
            if not any(p.requires_grad for p in params):
                why = "its parameters are frozen (requires_grad=False): intended only if model.freeze names it"
            elif all(p.grad is None for p in params):
                why = "backward never reaches it: unused in forward, or its output is detached / under no_grad"
            else:
                why = "its gradients are exactly zero: dead ReLUs (or a zero multiplier) on its path to the loss"
            log.warning(
                "stats: layer %s (%s) had no gradient at any of %d statistics steps: %s",
                name,
                type(module).__name__,
                self.logged,
                why,
            )


def _grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in module.parameters(recurse=False) if p.grad is not None]


def _histograms(groups: dict[str, list[torch.Tensor]]) -> dict[str, tuple[list[float], list[float]]]:
    """Return (counts, bin edges) of each group's values, binned on the device.

    All groups together cost 2 host syncs and no copy of the values. Groups holding NaN/inf are left out, since
    their norms already show it."""
    flat = {key: torch.cat([t.detach().float().flatten() for t in tensors]) for key, tensors in groups.items()}
    bounds = torch.stack([torch.stack(torch.aminmax(values)) for values in flat.values()]).tolist()
    out = {}
    for (key, values), (lo, hi) in zip(flat.items(), bounds):
        if not (math.isfinite(lo) and math.isfinite(hi)):
            continue
        lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)  # one value gets a bin around it, as in torch.histc
        out[key] = (torch.histc(values, HISTOGRAM_BINS, lo, hi), torch.linspace(lo, hi, HISTOGRAM_BINS + 1))
    counts = torch.stack([c for c, _ in out.values()]).tolist() if out else []
    return {key: (count, edges.tolist()) for (key, (_, edges)), count in zip(out.items(), counts)}
