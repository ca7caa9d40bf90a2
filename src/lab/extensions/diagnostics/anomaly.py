"""Stop at the first place a value turns NaN or inf and name it in one line (``debug=anomaly``).

This is a Trainer callback (``callback=anomaly``), active for the length of ``fit()``.

Forward hooks check every module's output as it is produced. That costs a host sync per module, which is fine for
a debugging mode. The run stops at the FIRST module with a non-finite output and names it, the step and epoch, its
input's range and whether its parameters were already non-finite. The batch's inputs are checked before the model
sees them, and the task's loss after it, so finite outputs with non-finite targets point at the data. A NaN made in
backward is caught by autograd's anomaly mode, whose error is summarised as the backward op and the line of the
forward call behind it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.errors import UserError
from lab.training.callbacks import Callback

log = logging.getLogger(__name__)

_BACKWARD_NAN = re.compile(r"Function '(\w+)' returned nan values in its (\w+) output")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_TORCH_DIR = str(Path(torch.__file__).parent)


def floating_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Yield the floating-point tensors in a module's inputs or outputs, looking inside tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from floating_tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from floating_tensors(item)


def finite(value: Any) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in floating_tensors(value))


def describe(value: Any) -> str:
    """Describe the range [lo, hi] of the finite values, plus the count of NaN and inf if there are any."""
    tensors = [t.detach().float().flatten() for t in floating_tensors(value)]
    if not tensors:
        return "no floating-point values"
    flat = torch.cat(tensors)
    nan, inf = int(flat.isnan().sum()), int(flat.isinf().sum())
    good = flat[torch.isfinite(flat)]
    text = f"range [{float(good.min()):.4g}, {float(good.max()):.4g}]" if good.numel() else "no finite value"
    if nan or inf:
        text += f", {nan} NaN and {inf} inf of {flat.numel()} values"
    return text


class NonFiniteDetector(Callback):
    """Check every module's output, the batch and the loss, with autograd's anomaly mode on, during ``fit()``.

    Any finding raises `UserError`, so the run ends with one line and a non-zero exit."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.names: dict[nn.Module, str] = {}
        self._handles: list[Any] = []
        self._last_finite: nn.Module | None = None  # latest module with a finite output in this forward
        self._forward_trace = ""  # autograd's traceback of the forward call behind a NaN in backward

    @contextlib.contextmanager
    def fitting(self, trainer: Any) -> Iterator[None]:
        self.trainer = trainer
        with torch.autograd.set_detect_anomaly(True), self:
            yield

    # ------------------------------------------------------------------ install / remove
    def __enter__(self) -> NonFiniteDetector:
        model = self.trainer.model
        self.names = {module: name or "(model)" for name, module in model.named_modules()}
        self._handles.append(model.register_forward_pre_hook(self._check_batch, with_kwargs=True))
        self._handles += [module.register_forward_hook(self._check_output) for module in model.modules()]
        # check the task's loss on its way out, via an instance attribute removed again in __exit__
        task, loss = self.trainer.task, self.trainer.task.loss
        self._own_loss = vars(task).get("loss")  # a task that set its loss as an attribute gets it back
        task.loss = lambda outputs, targets: self._check_loss(loss(outputs, targets), outputs, targets)
        self._show_warning, warnings.showwarning = warnings.showwarning, self._keep_forward_trace
        log.info("anomaly detection: every module's output, the batch and the loss are checked for NaN/inf (slow)")
        return self

    def __exit__(self, kind: type | None, err: BaseException | None, tb: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._own_loss is None:
            del self.trainer.task.loss  # the task's own method again
        else:
            self.trainer.task.loss = self._own_loss
        warnings.showwarning = self._show_warning
        if isinstance(err, RuntimeError) and not isinstance(err, UserError):
            found = _BACKWARD_NAN.search(str(err))
            if found:
                raise UserError(self._backward_message(found[1], found[2])) from err

    # ------------------------------------------------------------------ checks
    def _where(self, module: nn.Module | None = None) -> str:
        progress, module = self.trainer.progress, module or self.trainer.model
        phase = "training" if module.training else "validation after"
        return f"{phase} step {progress.global_step + (phase == 'training')} (epoch {progress.epoch + 1})"

    def _name(self, module: nn.Module) -> str:
        return f"`{self.names.get(module, '?')}` ({type(module).__name__})"

    def _check_batch(self, model: nn.Module, args: tuple, kwargs: dict) -> None:
        self._last_finite = None
        if not finite((args, kwargs)):
            raise UserError(
                f"anomaly: the data batch of {self._where(model)} holds non-finite inputs ({describe((args, kwargs))})"
                ": clean or filter the dataset (NaN/inf in the raw data or made by a transform)"
            )

    def _check_output(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        if finite(output):
            self._last_finite = module
            return
        where = f"anomaly: {self._where(module)}: the output of {self._name(module)} is non-finite ({describe(output)})"
        if not finite(inputs):  # went bad outside any module, in functional code of some forward
            after = f"after {self._name(self._last_finite)}" if self._last_finite is not None else "before any module"
            raise UserError(
                f"{where}; its input was already non-finite ({describe(inputs)}) though the batch was finite: it "
                f"turned non-finite in code between modules, {after} and before {self._name(module)}"
            )
        bad = [name for name, p in module.named_parameters(recurse=False) if not bool(torch.isfinite(p).all())]
        if bad:
            raise UserError(
                f"{where}; its parameters ({', '.join(bad)}) were already non-finite: an earlier update diverged "
                "(or they were initialised or loaded so); lower optimizer.lr or set trainer.grad_clip"
            )
        raise UserError(f"{where} though its input was finite ({describe(inputs)}): {self._advice()}")

    def _check_loss(self, loss: torch.Tensor, outputs: Any, targets: Any) -> torch.Tensor:
        if finite(loss):
            return loss
        where = f"anomaly: {self._where()}: the loss is non-finite ({describe(loss)}) though the model's outputs are"
        if not finite(targets):
            raise UserError(
                f"{where} finite: the batch's targets are non-finite ({describe(targets)}): clean the dataset"
            )
        raise UserError(
            f"{where} finite ({describe(outputs)}) and so are the targets: the task's loss overflows on these outputs "
            f"(e.g. a log of 0); {self._advice()}"
        )

    def _advice(self) -> str:
        if self.trainer.precision.autocast_dtype == torch.float16:
            return "values beyond float16's range (65504): try precision=bf16, or lower optimizer.lr"
        return "lower optimizer.lr, set trainer.grad_clip, or make that module's forward numerically safe"

    # ------------------------------------------------------------------ backward
    def _keep_forward_trace(self, message: Any, category: type, *args: Any, **kwargs: Any) -> None:
        """Keep autograd's anomaly warning for the one-line summary instead of printing it.

        The warning holds the full traceback of the forward call behind a NaN in backward. Every other warning is
        shown as usual."""
        if str(message).startswith("Error detected in"):
            self._forward_trace = str(message)
            return
        self._show_warning(message, category, *args, **kwargs)

    def _backward_message(self, op: str, output: str) -> str:
        frames = [m for m in _FRAME.finditer(self._forward_trace) if not m[1].startswith(_TORCH_DIR)]
        call = f": its forward call was {frames[-1][1]}:{frames[-1][2]} `{frames[-1][4].strip()}`" if frames else ""
        return (
            f"anomaly: {self._where()}: the backward of {op} produced NaN (in its {output} output){call}; the forward "
            "pass was finite, so the op's gradient is undefined there (e.g. sqrt or log at 0, 0/0): guard its input "
            "(clamp, add an epsilon)"
        )
