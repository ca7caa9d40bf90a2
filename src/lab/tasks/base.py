"""The Task interface: everything the trainer and the four workflows need to know about *what* is learned.

The trainer and the workflows call only these methods; classification, regression and language modelling (and a
fork's own task) differ here and nowhere else. A task is built per run from its config node and the dataset's
``meta`` by ``lab.tasks.build``: a ``task`` option's ``build(meta)`` (``lab.config.tasks``) makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from torch import nn

from lab.errors import UserError

_COUNTS: dict[tuple[float, torch.device], torch.Tensor] = {}

# What a task's summed loss averages over (``Task.normaliser``), i.e. what ``BaseTask.weight(targets)`` counts:
#   "samples":  the batch's samples (the targets' first axis): one image, one table row, one sequence each
#   "elements": every target value (targets.numel()): per-pixel losses of a dense task, per-output regression
#   "tokens":   the target values other than ``ignore_index`` (padding tokens, unlabelled pixels weigh nothing)
NORMALISERS = ("samples", "elements", "tokens")


def count(n: float, device: torch.device) -> torch.Tensor:
    """``n`` as a scalar tensor for ``Task.weight``, made once per (n, device): the batch size repeats every step,
    and a fill per step is an allocation (on a GPU, a kernel launch) the step does not need. Read-only: the trainer
    never changes it."""
    key = (float(n), device)
    if key not in _COUNTS:
        _COUNTS[key] = torch.full((), float(n), device=device)
    return _COUNTS[key]


def normalised_weight(normaliser: str, targets: Any, ignore_index: int = -100) -> torch.Tensor:
    """The weight of one batch under ``normaliser`` (see ``NORMALISERS``), a float32 scalar on the targets' own
    device: the trainer calls ``Task.weight`` on the targets as the loader gives them (CPU tensors, or device
    tensors when the data lives there) and moves the result itself. Counts of samples and elements are the cached
    ``count`` tensors; "tokens" counts on the targets (one small reduction)."""
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
    """The targets themselves, or the first tensor of a tuple/dict of them."""
    if isinstance(data, torch.Tensor) or data is None:
        return data
    values = list(data.values()) if isinstance(data, dict) else list(data) if isinstance(data, tuple | list) else []
    return next((t for t in map(_first_tensor, values) if t is not None), None)


class Metrics(Protocol):
    """An exact metric accumulator. Running *sums* live in tensor attributes on the device (no host sync per
    batch); ``Parallel.reduce_metrics`` sums every tensor attribute across ranks once; ``compute`` divides once.
    A torchmetrics object it holds (not a tensor attribute, so not summed there) syncs itself in ``compute``, which
    every rank calls (``lab.tasks.class_scores``)."""

    def update(self, outputs: Any, targets: Any) -> None: ...

    def compute(self) -> dict[str, float]: ...


# The accumulator a task's `metrics` makes, which its `write_eval_artifacts` gets back: a task with its own writes
# `class MyTask(BaseTask[MyMetrics])`; a bare `BaseTask` / `Task` leaves it unchecked (Any).
MetricsT = TypeVar("MetricsT", bound=Metrics)


class MeanLoss:
    """``BaseTask``'s accumulator: the task's own summed ``loss`` and ``weight`` per batch, so ``val/loss`` is the
    training objective's average, written once (in ``loss``). A task with more metrics writes its own."""

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
    """What a task may use to write its eval artifacts (plots, sample generations) into ``run_dir``."""

    run_dir: Path
    title: str  # checkpoint, split and sample count, for figure titles
    model: nn.Module  # eval mode, on `device`
    device: torch.device
    meta: dict[str, Any]


@dataclass
class InferContext:
    """What ``Task.predict`` gets besides the runner: the infer config (``input``, ``prompt``, ``infer.*``), the
    checkpoint's data ``meta``, where the run writes (``run_dir``: masks, generated files) and whether image inputs
    are resized to the training size (``resize``; ``inputs`` reads them accordingly)."""

    cfg: Any
    meta: dict[str, Any]
    run_dir: Path
    resize: bool = True

    def inputs(self) -> Any:
        """The files ``input=`` names, read by suffix (``lab.inference.inputs``): an iterable of (name, model-ready
        tensor) with ``sizes[name]`` (each input's original spatial size) and ``skipped``."""
        from lab.inference.inputs import Inputs

        if not self.cfg.input:
            raise UserError("input= is required: images, a folder or glob of them, a .npy/.pt tensor or .csv rows")
        return Inputs.read(self.cfg.input, self.meta, resize=self.resize)


@dataclass
class Predictions:
    """What infer writes: one record per input (flat dicts become predictions.csv rows) and what was skipped."""

    records: list[dict[str, Any]]
    skipped: list[dict[str, str]]


class Task(Protocol[MetricsT]):
    """What training, eval, export and infer ask of a task. A new task subclasses BaseTask, which has a default for
    each method but the loss. The task's option (a TaskConfig) builds it and sets its name, monitor and mode."""

    # outputs: what the model returns, as it returns it (a tensor, a tuple/list or a dict of them: lab.tasks.outputs,
    # which reads the optional ``output_names`` a task gives a tuple's outputs)
    name: str
    monitor: str  # the validation metric (without "val/") that best.pt, plateau scheduling and sweeps follow
    mode: str  # "max" or "min": the direction in which `monitor` improves
    normaliser: str  # what the summed loss averages over: "samples" | "elements" | "tokens" (see NORMALISERS)
    # the names of a tuple's or list's outputs in the ONNX file, the manifest and predictions.csv (None: output_0,
    # output_1...); a dict's keys name its own
    output_names: tuple[str, ...] | None

    # input axes an exported model accepts at any size: (0,) the batch; (0, 1) + a token sequence; (0, 2, 3) + the
    # height and width of (N, C, H, W) images (a fully convolutional model). Infer resizes images to the training
    # size unless both H and W are dynamic. export.dynamic_dims overrides it for one export.
    @property
    def dynamic_dims(self) -> tuple[int, ...]: ...

    def prepare(self, train_set: Any) -> None:
        """Before training (``lab.tasks.build`` with the training split): take what the task needs from the data it
        trains on (classification's balanced class weights count its labels). Eval, export and infer skip it."""

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        """Raise UserError when the data cannot fit the task (labels out of range, non-finite targets, tokens out
        of the vocabulary); return a one-line description for the start-of-run report, beyond the targets' shapes
        it already gives ("" for nothing more)."""

    def weight(self, targets: Any) -> torch.Tensor:
        """What one batch's loss averages over, a float scalar on the targets' device (CPU for a CPU loader: the
        trainer moves it): ``normaliser`` counted on ``targets``. The trainer divides each micro-batch's summed loss
        by the weight of the whole accumulation group (over all ranks)."""

    def loss(self, outputs: Any, targets: Any) -> torch.Tensor:
        """The batch's loss *summed* over its weighted items, computed in fp32 (outputs may be bf16/fp16)."""

    def metrics(self, device: torch.device, full: bool = False) -> MetricsT:
        """A fresh accumulator; ``full`` adds what only an evaluation run reports (e.g. a confusion matrix). Its
        loss comes from the formula ``loss`` uses (one function both call), never a second copy of it."""

    def write_eval_artifacts(self, metrics: MetricsT, context: EvalContext) -> tuple[dict[str, Any], list[Path]]:
        """eval.py: the extra eval.json entries and the artifact files written into ``context.run_dir``."""

    def agreement(self, reference: Any, outputs: Any) -> float | None:
        """Export parity beyond max |diff|: the share of samples whose decision agrees (top-1), or None. Both are
        outputs as the model returns them (a tensor; the tuple or dict of a model of several: lab.tasks.outputs)."""

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        """infer.py: read the inputs (``context.inputs()``, or a prompt), run ``backend`` and turn outputs into
        records; files beyond predictions.csv/.json (masks...) go into ``context.run_dir``."""


class BaseTask(Generic[MetricsT]):
    """Defaults for a new task: subclass it and write ``loss`` (and ``metrics`` for more than the mean loss;
    ``lab.tasks.build`` sets ``name``, ``monitor`` and ``mode`` from the task's option). The loss averages over
    samples (``normaliser``: one word to change it); the metric is the mean loss; eval writes eval.json only; export
    parity is max |diff| alone; infer runs the model on each input ``input=`` names and records the outputs (one
    column group per output of a model of several, named as ``output_names`` or the model's dict names them)."""

    name = "task"
    monitor = "loss"
    mode = "min"
    normaliser = "samples"
    ignore_index = -100  # normaliser="tokens": the target value that carries no weight
    dynamic_dims: tuple[int, ...] = (0,)
    # outputs of at most this many values go into predictions.csv as output_0, output_1...; bigger ones (a mask, a
    # feature map) into <run dir>/outputs/<n>.npy, named in the record's output_file
    max_csv_outputs = 32
    # a model returning a tuple or list: its outputs' names in the ONNX file, the manifest and predictions.csv
    # (None: output_0, output_1...); a dict's keys name its own (lab.tasks.outputs)
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
        # the mean loss: a task that names its own accumulator (BaseTask[MyMetrics]) overrides this
        return cast(MetricsT, MeanLoss(self, device))

    def write_eval_artifacts(self, metrics: MetricsT, context: EvalContext) -> tuple[dict[str, Any], list[Path]]:
        return {}, []

    def agreement(self, reference: Any, outputs: Any) -> float | None:
        return None

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        from lab.inference.predict import batched_outputs, output_record, per_input

        inputs = context.inputs()
        records: list[dict[str, Any]] = []
        for names, outputs in batched_outputs(backend, inputs, context.cfg.infer.batch_size, inputs.skipped):
            for name, output in zip(names, per_input(outputs, len(names), self)):
                record = output_record(output, context.run_dir, len(records), self.max_csv_outputs)
                records.append({"path": name, **record})
        return Predictions(records, inputs.skipped)
