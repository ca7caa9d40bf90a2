"""The Task interface: everything the trainer and the four workflows need to know about *what* is learned.
`lab.tasks.common.build` makes a task per run from its config node and the dataset's `meta`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from torch import nn

from lab.errors import UserError

_COUNTS: dict[tuple[float, torch.device], torch.Tensor] = {}

# What a task's summed loss averages over (`Task.normaliser`), i.e. what `BaseTask.weight(targets)` counts:
#   "samples":  the batch's samples (the targets' first axis): one image, one table row, one sequence each
#   "elements": every target value (targets.numel()): per-pixel losses of a dense task, per-output regression
#   "tokens":   target values other than `ignore_index`, so padding tokens and unlabelled pixels weigh nothing
NORMALISERS = ("samples", "elements", "tokens")


def count(n: float, device: torch.device) -> torch.Tensor:
    """Return `n` as a scalar tensor for `Task.weight`, made once per (n, device). Callers must not modify it.
    The batch size repeats every step, and a fill per step is an allocation (on a GPU, a kernel launch)."""
    key = (float(n), device)
    if key not in _COUNTS:
        _COUNTS[key] = torch.full((), float(n), device=device)
    return _COUNTS[key]


def normalised_weight(normaliser: str, targets: Any, ignore_index: int = -100) -> torch.Tensor:
    """Return the weight of one batch under `normaliser`, a float32 scalar on the targets' own device (CPU, or
    the device when the data lives there): the trainer moves it."""
    tensor = _first_tensor(targets)
    device = tensor.device if tensor is not None else torch.device("cpu")
    if normaliser == "samples":
        from lab.data.batches import size

        return count(size(targets), device)
    if tensor is None:
        raise TypeError(f"normaliser={normaliser!r} needs tensor targets, got {type(targets).__name__}")
    if normaliser == "elements":
        return count(tensor.numel(), device)
    if normaliser == "tokens":
        return (tensor != ignore_index).sum().float()
    raise ValueError(f"normaliser must be one of {', '.join(NORMALISERS)}, got {normaliser!r}")


def _first_tensor(data: Any) -> torch.Tensor | None:
    """Return the targets themselves, or the first tensor of a tuple/dict of them."""
    if isinstance(data, torch.Tensor) or data is None:
        return data
    values = list(data.values()) if isinstance(data, dict) else list(data) if isinstance(data, tuple | list) else []
    return next((t for t in map(_first_tensor, values) if t is not None), None)


class Metrics(Protocol):
    """An exact metric accumulator.
    Running *sums* live in tensor attributes on the device, so there is no host sync per batch.
    `Parallel.reduce_metrics` sums every tensor attribute across ranks once, then `compute` divides once. A
    torchmetrics object it holds is not summed there; it syncs itself in `compute`, which every rank calls."""

    def update(self, outputs: Any, targets: Any) -> None: ...

    def compute(self) -> dict[str, float]: ...


# The accumulator a task's `metrics` makes and its `write_eval_artifacts` gets back. A task with its own writes
# `class MyTask(BaseTask[MyMetrics])`; a bare `BaseTask` / `Task` leaves it unchecked (Any).
MetricsT = TypeVar("MetricsT", bound=Metrics)


class MeanLoss:
    """`BaseTask`'s accumulator: sums the task's own `loss` and `weight` per batch, so `val/loss` averages the
    training objective, defined once in `loss`. A task with more metrics writes its own."""

    def __init__(self, task: Any, device: torch.device) -> None:
        self.task = task
        self.totals = torch.zeros(2, dtype=torch.float64, device=device)  # summed loss, summed weight

    def update(self, outputs: Any, targets: Any) -> None:
        loss = self.task.loss(outputs, targets).double()
        self.totals += torch.stack([loss, self.task.weight(targets).to(loss.device, torch.float64)])

    def compute(self) -> dict[str, float]:
        loss, weight = self.totals.tolist()
        return {"loss": loss / weight} if weight else {}


@dataclass
class EvalContext:
    """What a task may use to write its eval artifacts (plots, sample generations) into `run_dir`."""

    run_dir: Path
    title: str  # checkpoint, split and sample count, for figure titles
    model: nn.Module  # eval mode, on `device`
    device: torch.device
    meta: dict[str, Any]
    codec: Any = None  # the data option's text_codec(meta) (lab.data.text.TextCodec); None: meta's own


@dataclass
class InferContext:
    """What `Task.predict` gets besides the runner: the infer config (`input`, `prompt`, `infer.*`), the
    checkpoint's data `meta`, where the run writes (masks, generated files) and whether `inputs` resizes images."""

    cfg: Any
    meta: dict[str, Any]
    run_dir: Path
    # lab.inference.inputs.Inputs.read with the model option's own readers: infer, a layer above this one, passes it
    read: Callable[..., Any]
    resize: bool = True
    codec: Any = None  # the data option's text_codec(meta) (lab.data.text.TextCodec); None: meta's own

    def inputs(self) -> Any:
        """Read the files `input=` names: (name, model-ready tensor) pairs, with `sizes[name]` and `skipped`."""
        if not self.cfg.input:
            raise UserError("input= is required: images, a folder or glob of them, a .npy/.pt tensor or .csv rows")
        return self.read(self.cfg.input, self.meta, resize=self.resize)


@dataclass
class Predictions:
    """What infer writes: one record per input (flat dicts become predictions.csv rows) and what was skipped."""

    records: list[dict[str, Any]]
    skipped: list[dict[str, str]]


class Task(Protocol[MetricsT]):
    """What training, eval, export and infer ask of a task.
    A new task subclasses BaseTask, which has a default for each method but the loss. The task's option (a
    TaskConfig) builds it and sets its name, monitor and mode."""

    # `outputs` below is what the model returns, as it returns it: a tensor, or a tuple/list/dict of them
    # (`lab.tasks.outputs`)
    name: str
    monitor: str  # the validation metric (without "val/") that best.pt, plateau scheduling and sweeps follow
    mode: str  # "max" or "min", the direction in which `monitor` improves
    normaliser: str  # what the summed loss averages over: "samples" | "elements" | "tokens" (see NORMALISERS)
    # Names of a tuple's or list's outputs in the ONNX file, the manifest and predictions.csv (None means output_0,
    # output_1...). A dict's keys name its own
    output_names: tuple[str, ...] | None

    # Input axes an exported model accepts at any size: (0,) the batch; (0, 1) also a token sequence; (0, 2, 3) also
    # the height and width of (N, C, H, W) images (a fully convolutional model). Infer resizes images to the
    # training size unless both H and W are dynamic. export.dynamic_dims overrides it for one export.
    @property
    def dynamic_dims(self) -> tuple[int, ...]: ...

    def prepare(self, train_set: Any) -> None:
        """Take what the task needs from its training data, before training (e.g. balanced class weights).
        `lab.tasks.common.build` calls it when given the training split; eval, export and infer skip it."""

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        """Raise UserError when the data cannot fit the task (labels out of range, non-finite targets, unknown
        tokens). Return a line for the start-of-run report beyond the targets' shapes, or "" for nothing more."""

    def weight(self, targets: Any) -> torch.Tensor:
        """Return what one batch's loss averages over: `normaliser` counted on `targets`, a float scalar on their
        device (the trainer moves it). Each micro-batch's summed loss is divided by the weight of the whole
        accumulation group, over all ranks."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        """Return the batch's loss *summed* over its weighted items, computed in fp32 (outputs may be bf16/fp16)."""

    def metrics(self, device: torch.device, full: bool = False) -> MetricsT:
        """Return a fresh accumulator. `full` adds what only an evaluation run reports (e.g. a confusion matrix).
        Its loss must call the same function as `loss`, never a second copy of the formula."""

    def write_eval_artifacts(self, metrics: MetricsT, context: EvalContext) -> tuple[dict[str, Any], list[Path]]:
        """Return the extra eval.json entries and the artifact files written into `context.run_dir` (eval.py)."""

    def agreement(self, reference: Any, outputs: Any) -> float | None:
        """Return the share of samples whose top-1 decision agrees, or None: export parity beyond max |diff|.
        Both arguments are outputs as the model returns them (`lab.tasks.outputs`)."""

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        """Read the inputs (`context.inputs()` or a prompt), run `backend` and turn outputs into records (infer.py).
        Files beyond predictions.csv/.json, such as masks, go into `context.run_dir`."""


class BaseTask(Generic[MetricsT]):
    """Defaults for a new task: subclass it and write `loss`, and `metrics` for more than the mean loss.
    `lab.tasks.common.build` sets `name`, `monitor` and `mode` from the task's option. By default the loss averages over
    samples (change the `normaliser` word), the metric is the mean loss, eval writes eval.json only, and export
    parity is max |diff| alone. Infer runs the model on each input and records the outputs, one column group per
    output, named by `output_names` or the model's dict keys."""

    name = "task"
    monitor = "loss"
    mode = "min"
    normaliser = "samples"
    ignore_index = -100  # the target value that carries no weight with normaliser="tokens"
    dynamic_dims: tuple[int, ...] = (0,)
    # Outputs of at most this many values go into predictions.csv as output_0, output_1... Bigger ones (a mask, a
    # feature map) go to <run dir>/outputs/<n>.npy, named in the record's output_file
    max_csv_outputs = 32
    output_names: tuple[str, ...] | None = None

    def prepare(self, train_set: Any) -> None:
        pass  # nothing taken from the training data

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        return ""  # nothing to check; the report gives the targets' shapes itself

    def weight(self, targets: Any) -> torch.Tensor:
        return normalised_weight(self.normaliser, targets, self.ignore_index)

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no loss(outputs, targets)")

    def metrics(self, device: torch.device, full: bool = False) -> MetricsT:
        # The mean loss. A task that names its own accumulator (BaseTask[MyMetrics]) overrides this
        return cast(MetricsT, MeanLoss(self, device))

    def write_eval_artifacts(self, metrics: MetricsT, context: EvalContext) -> tuple[dict[str, Any], list[Path]]:
        return {}, []

    def agreement(self, reference: Any, outputs: Any) -> float | None:
        return None

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        from lab.tasks.outputs import batched_outputs, output_record, per_input

        inputs = context.inputs()
        records: list[dict[str, Any]] = []
        for names, outputs in batched_outputs(backend, inputs, context.cfg.infer.batch_size, inputs.skipped):
            for name, output in zip(names, per_input(outputs, len(names), self)):
                record = output_record(output, context.run_dir, len(records), self.max_csv_outputs)
                records.append({"path": name, **record})
        return Predictions(records, inputs.skipped)
