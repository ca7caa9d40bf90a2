"""The training metrics between two log lines. Losses stay on the device until the line is written, so the step
never waits for the GPU."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator

import torch

from lab.distributed.parallel import Parallel
from lab.errors import UserError
from lab.runtime import peak_memory_mb


class StepWindow:
    """The losses, timing and sample count of the steps between two log lines. `carried` holds the window's
    losses and weights from before a resume (what `checked_losses` gave at the save), so the first line after a
    resume averages the same steps as an uninterrupted run."""

    def __init__(self, carried: dict[str, list[float]] | None = None) -> None:
        self.carried = carried or {"losses": [], "weights": []}
        self.start = time.perf_counter()
        self.data_time = 0.0  # seconds spent waiting for batches
        self.samples = 0
        self.loss_sums: list[torch.Tensor] = []  # one per micro-batch, on the device
        self.weights: list[torch.Tensor] = []  # what each sum is over (samples, tokens), on the device
        self.steps: list[int] = []  # the optimizer step each loss belongs to
        self.epochs: list[int] = []  # and its epoch (0-based), as a window can span two
        self.grad_norm: torch.Tensor | None = None  # at the last optimizer step

    def add(self, loss_sum: torch.Tensor, weight: torch.Tensor, step: int, epoch: int, samples: int) -> None:
        self.loss_sums.append(loss_sum.detach())
        self.weights.append(weight)
        self.steps.append(step)
        self.epochs.append(epoch)
        self.samples += samples

    def checked_losses(self, parallel: Parallel, skips_nonfinite: bool) -> tuple[list[float], list[float]]:
        """Return the carried losses and weights, then each micro-batch's mean loss over all ranks and its total
        weight. Raise a `UserError` at the first non-finite loss unless such steps are skipped (`skips_nonfinite`: a
        GradScaler, or trainer.max_bad_steps). Every rank sees the same values, so every rank stops."""
        losses: list[float] = []
        weights: list[float] = []
        if self.loss_sums:
            # host floats after one all-reduce: a window's few dozen values cost less as Python numbers than as a
            # dozen tensor ops (this runs once per log line and checkpoint, but on CPU each op costs microseconds)
            sums = parallel.all_reduce_sum_(torch.stack([*self.loss_sums, *self.weights]).double()).tolist()
            weights = sums[len(self.loss_sums) :]
            losses = [total / weight for total, weight in zip(sums, weights)]
        bad = next((index for index, loss in enumerate(losses) if not math.isfinite(loss)), None)
        if bad is not None and not skips_nonfinite:
            raise UserError(
                f"loss became {losses[bad]} at optimizer step {self.steps[bad]} (epoch {self.epochs[bad] + 1}); "
                "lower optimizer.lr, set trainer.grad_clip, try precision=bf16 or fp32, or check the inputs "
                "(the first-batch report in the log)"
            )
        return [*self.carried["losses"], *losses], [*self.carried["weights"], *weights]

    def train_metrics(
        self, losses: list[float], weights: list[float], world_size: int, lr: float, device: torch.device
    ) -> dict[str, float]:
        """Return the log line's figures for this window, given `losses` and `weights` from `checked_losses`. The
        loss is the weighted mean of the finite losses, leaving out fp16 steps the GradScaler skipped."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        finite = [(loss, weight) for loss, weight in zip(losses, weights) if math.isfinite(loss)]
        total = math.fsum(weight for _, weight in finite)
        norm = self.grad_norm
        if norm is not None and hasattr(norm, "full_tensor"):  # a DTensor under FSDP
            norm = norm.full_tensor()
        return {
            "train/loss": math.fsum(loss * weight for loss, weight in finite) / total if finite else math.nan,
            "train/lr": lr,
            "train/grad_norm": math.nan if norm is None else float(norm),
            "train/throughput": self.samples * world_size / elapsed,
            "train/data_wait": min(1.0, self.data_time / elapsed),
            "train/mem_peak_mb": peak_memory_mb(device),
        }

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Pause the clock, so validation and checkpoint time don't count against training throughput."""
        start = time.perf_counter()
        yield
        self.start += time.perf_counter() - start


def log_line(epoch: int, step: int, metrics: dict[str, float]) -> str:
    """Return the console line of a logged window, used when there is no progress bar."""
    return (
        f"epoch {epoch} step {step}  loss {metrics['train/loss']:.4f}  lr {metrics['train/lr']:.3g}  "
        f"grad_norm {metrics['train/grad_norm']:.3g}  {metrics['train/throughput']:.0f} samples/s  "
        f"data {100 * metrics['train/data_wait']:.0f}%"
    )
