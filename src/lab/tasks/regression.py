"""Regression: mean squared error on standardised targets; RMSE, MAE and R^2 in the target's own units."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from lab.errors import UserError
from lab.tasks.base import BaseTask, EvalContext, InferContext, Predictions


def residuals(outputs: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Return outputs - targets per target value, in `dtype`: the one definition of the error.
    The loss sums its squares in fp32 (the MSE objective). The metrics sum its squares and magnitudes in float64."""
    return outputs.to(dtype).reshape(targets.shape) - targets.to(dtype)


class RegressionMetrics:
    """Accumulate float64 sums on the device. `compute` converts errors back to the target's units (x std) once.
    `keep=True` also keeps every (predicted, true) pair for eval's plot."""

    def __init__(self, mean: float, std: float, device: torch.device, keep: bool = False) -> None:
        self.mean, self.std = mean, std
        # squared error, |error|, true, true^2 (all standardised), count
        self.totals = torch.zeros(5, dtype=torch.float64, device=device)
        self.pairs: list[torch.Tensor] | None = [] if keep else None

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        error = residuals(outputs.float(), targets, torch.float64)
        true = targets.double()
        # Fill the count on the device: new_tensor would copy a host value, which waits for the GPU's queue
        samples = true.new_full((), true.numel())
        self.totals += torch.stack([error.square().sum(), error.abs().sum(), true.sum(), true.square().sum(), samples])
        if self.pairs is not None:
            predicted = outputs.float().reshape(targets.shape).double()
            self.pairs.append(torch.stack([predicted.flatten(), true.flatten()], 1).cpu())

    def compute(self) -> dict[str, float]:
        squared, absolute, total, total_sq, count = self.totals.tolist()
        if count == 0:
            return {}
        variance = total_sq / count - (total / count) ** 2  # of the true values, R^2's baseline
        return {
            "loss": squared / count,  # the training objective, MSE of the standardised target
            "rmse": math.sqrt(squared / count) * self.std,
            "mae": absolute / count * self.std,
            "r2": 1 - (squared / count) / variance if variance > 0 else math.nan,
        }

    def predicted_and_true(self) -> tuple[list[float], list[float]]:
        """Return every (predicted, true) pair seen, in the target's units (needs `keep=True`)."""
        pairs = torch.cat(self.pairs) * self.std + self.mean if self.pairs else torch.zeros(0, 2)
        return pairs[:, 0].tolist(), pairs[:, 1].tolist()


class Regression(BaseTask[RegressionMetrics]):
    name = "regression"
    monitor = "rmse"
    mode = "min"
    normaliser = "elements"  # every target value (one per sample for a single target)

    def __init__(self, target_mean: float = 0.0, target_std: float = 1.0, target_name: str | None = None) -> None:
        self.target_mean, self.target_std = target_mean, target_std
        self.target_name = target_name or "target"

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        if not isinstance(targets, torch.Tensor) or not targets.is_floating_point():
            found = targets.dtype if isinstance(targets, torch.Tensor) else type(targets).__name__
            raise UserError(
                f"task=regression needs real-valued targets, but they are {found}; use task=classification for "
                "class labels (data=csv: data.target_type follows the task)"
            )
        if not torch.isfinite(targets).all():
            raise UserError("the first training batch has NaN or inf targets; clean the target column")
        return f"{self.target_name} standardised, range [{float(targets.min()):.3f}, {float(targets.max()):.3f}]"

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if outputs.numel() != targets.numel():
            raise UserError(
                f"the model gives {tuple(outputs.shape)} outputs for {tuple(targets.shape)} targets; a regression "
                "model needs one output per target value (num_outputs in data_meta)"
            )
        return residuals(outputs, targets).square().sum()  # summed squared error in fp32

    def metrics(self, device: torch.device, full: bool = False) -> RegressionMetrics:
        return RegressionMetrics(self.target_mean, self.target_std, device, keep=full)

    def write_eval_artifacts(
        self, metrics: RegressionMetrics, context: EvalContext
    ) -> tuple[dict[str, Any], list[Path]]:
        predicted, true = metrics.predicted_and_true()
        scores = metrics.compute()
        title = f"{context.title}, RMSE {scores['rmse']:.4g}, R2 {scores['r2']:.3f}"
        from lab.tasks import figures  # only evaluation draws

        figure = figures.predicted_vs_true_png(predicted, true, context.run_dir / "predicted_vs_true.png", title)
        extra = {"target": self.target_name, "target_mean": self.target_mean, "target_std": self.target_std}
        return extra, [figure]

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        """Predict values in the target's units for table rows (.csv with the feature columns, or .npy/.pt (N, F))."""
        from lab.tasks.outputs import batched_outputs

        inputs = context.inputs()
        records: list[dict[str, Any]] = []
        skipped = inputs.skipped
        for names, outputs in batched_outputs(backend, inputs, context.cfg.infer.batch_size, skipped):
            values = outputs.reshape(len(names), -1) * self.target_std + self.target_mean
            for name, row in zip(names, values.tolist()):
                records.append({"path": name, self.target_name: row[0] if len(row) == 1 else row})
        return Predictions(records, skipped)
