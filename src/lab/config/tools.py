"""Schemas of the entry points that read a checkpoint (conf/eval.yaml, conf/export.yaml, conf/infer.yaml), and the
`eval_step` and `export_step` kinds: what eval and export run after their own work, each with its settings in
`eval.<name>` / `export.<name>`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lab import extras
from lab.config import options
from lab.config.checks import at_least, seed, wandb_tags
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option
from lab.config.trackers import LoggerConfig, logger_config
from lab.config.training import PathsConfig

_CKPT_HINT = "e.g. ckpt_path=outputs/train/<run>/checkpoints/best.pt"


@dataclass
class CheckpointDataConfig:
    """What eval/export may change in a checkpoint's `data` config (null: as trained): where the files are and how
    they are batched. What the model sees (dataset, image size, normalization, split seeds) stays as trained, so a
    split means the same samples it meant in training."""

    root: str | None = None
    download: bool | None = None
    batch_size: int | None = None
    eval_batch_size: int | None = None
    num_workers: int | None = None

    def __post_init__(self) -> None:
        at_least("data.batch_size", self.batch_size, 1, or_null=True)
        at_least("data.eval_batch_size", self.eval_batch_size, 1, or_null=True)
        at_least("data.num_workers", self.num_workers, 0, or_null=True)


@dataclass
class EvalOptions:
    split: str = "test"  # test | val: which split of the checkpoint's own dataset to score

    def __post_init__(self) -> None:
        _one_of("eval.split", self.split, ("test", "val"))

    def steps(self) -> list[EvalStepConfig]:
        """Return the settings of every eval step (`eval.<name>`) in name order; `eval_options` adds them."""
        return [value for value in vars(self).values() if isinstance(value, EvalStepConfig)]


@dataclass
class EvalStepConfig(Option, group="eval_step", key=""):
    """A step eval runs once the split is scored (an extension's benchmark harness). Like an export step, its settings
    `eval.<name>` say whether it is on. `run` adds its eval.json sections, logged numbers and files to its
    `lab.workflows.evaluate.Evaluation`."""

    @classmethod
    def stored_as(cls, name: str) -> None:
        return None

    def refuse(self, restored: Any) -> str | None:
        """Return why these settings cannot run on the checkpoint `restored` (refused before eval writes), or None."""
        return None

    def run(self, evaluation: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} needs a run(evaluation)")


def eval_options() -> EvalOptions:
    """Return the `eval` node's defaults, with a node `eval.<name>` per eval step, typed by its option."""
    return options.node_per_option(EvalOptions, "eval_step", "eval", "EvalStepsOptions")()


@dataclass
class EvalConfig:
    task_name: str = "eval"
    ckpt_path: str | None = None  # required: the checkpoint to score
    device: str = "auto"  # auto | cpu | cuda | mps
    tags: list[str] = field(default_factory=list)
    eval: EvalOptions = field(default_factory=eval_options)  # + eval.<name> per eval step
    data: CheckpointDataConfig = field(default_factory=CheckpointDataConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: LoggerConfig = field(default_factory=logger_config)

    def __post_init__(self) -> None:
        _require(bool(self.ckpt_path), f"ckpt_path is required: the checkpoint to evaluate, {_CKPT_HINT}")
        wandb_tags("tags", self.tags)
        _one_of("device", self.device, ("auto", "cpu", "cuda", "mps"))


ONNX = ("onnx", "onnxscript", "onnxruntime")  # export.formats=onnx needs these for torch.onnx and the parity run


@dataclass
class ExportOptions:
    # any of onnx | pt2 | torchscript (deprecated in torch, kept working)
    formats: list[str] = field(default_factory=lambda: ["onnx", "pt2"])
    # max |logits - eager logits| on validation samples; above it the export fails and its file is removed
    tolerance: float = 1e-4
    opset: int | None = None  # ONNX opset; null = what torch.onnx recommends
    parity_samples: int = 256  # validation samples the parity check runs on
    # Input axes the exported model accepts at any size, e.g. [0, 2, 3] for batch, height and width of (N, C, H, W)
    # images in a fully convolutional model. null = the task's dynamic_dims ([0]; [0, 1] for a language model).
    # Parity also runs a second size along each of them.
    dynamic_dims: list[int] | None = None

    def __post_init__(self) -> None:
        own = [fmt for step in self.steps() for fmt in step.formats]  # an extension's formats, written by its step
        known = ("onnx", "pt2", "torchscript", *own)
        _require(len(self.formats) >= 1, f"export.formats must name at least one of {', '.join(known)}")
        for name in self.formats:
            _one_of("export.formats", name, known)
        _require(len(set(self.formats)) == len(self.formats), f"export.formats has duplicates: {self.formats}")
        mixed = [name for name in self.formats if name in own]
        _require(
            not mixed or len(self.formats) == 1,
            f"export.formats={mixed[0] if mixed else ''} is written alone: export {self.formats} in separate runs",
        )
        at_least("export.tolerance", self.tolerance, 0, strict=True)
        at_least("export.opset", self.opset, 18, or_null=True)
        at_least("export.parity_samples", self.parity_samples, 1)
        dims = self.dynamic_dims
        _require(
            dims is None or (0 in dims and all(d >= 0 for d in dims) and len(set(dims)) == len(dims)),
            f"export.dynamic_dims must list distinct input axes including 0 (the batch), got {dims}",
        )
        for step in self.steps():
            why = step.conflict(self)
            _require(why is None, str(why))

    def steps(self) -> list[ExportStepConfig]:
        """Return the settings of every export step (`export.<name>`) in name order; `export_options` adds them."""
        return [value for value in vars(self).values() if isinstance(value, ExportStepConfig)]


@dataclass
class ExportStepConfig(Option, group="export_step", key=""):
    """A step every export runs, in name order, once its formats are written and checked. Its settings node
    `export.<name>` says whether it is on; nobody chooses it by name, so it is not stored as a group option.

        @dataclass
        class Int8Config(ExportStepConfig):    # export.int8.quantize=dynamic
            quantize: str | None = None

            def run(self, export):             # export: lab.exporting.steps.Export (import torch code here)
                ...
    """

    # Formats of `export.formats` this step writes itself (a model's own format, a directory of its library's),
    # each alone in its export run: `write_format` replaces the core's writers, parity and manifest.
    formats: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def stored_as(cls, name: str) -> None:
        return None

    def refuse_checkpoint(self, fmt: str, restored: Any) -> str | None:
        """Return why format `fmt` cannot export the rebuilt checkpoint `restored` (refusing it, before any write)."""
        return None

    def write_format(self, fmt: str, restored: Any, val_loader: Any, folder: Path, tolerance: float) -> dict[str, Any]:
        """Write format `fmt` of `restored` into the fresh `folder`, check it on `val_loader`'s first batch, and
        return its entry (`parity` with `max_abs_diff`); raise a UserError if it differs by more than `tolerance`."""
        raise NotImplementedError(f"{type(self).__name__} names formats {self.formats} but has no write_format")

    def refuse_model(self, outputs: Any, layout: Any) -> str | None:
        """Return why these settings cannot export a model with eager `outputs` of `layout` (refusing it), or None."""
        return None

    def run(self, export: Any) -> None:
        """Run the step on `export` (a `lab.exporting.steps.Export`), adding files, manifest sections and figures."""
        raise NotImplementedError(f"{type(self).__name__} needs a run(export)")


def export_options() -> ExportOptions:
    """Return the `export` node's defaults, with a node `export.<name>` per export step, typed by its option."""
    return options.node_per_option(ExportOptions, "export_step", "export", "ExportStepsOptions")()


@dataclass
class ExportConfig:
    task_name: str = "export"
    ckpt_path: str | None = None  # required: the checkpoint to export
    tags: list[str] = field(default_factory=list)
    export: ExportOptions = field(default_factory=export_options)  # + export.<name> per export step
    data: CheckpointDataConfig = field(default_factory=CheckpointDataConfig)  # validation samples for parity
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: LoggerConfig = field(default_factory=logger_config)

    def __post_init__(self) -> None:
        _require(bool(self.ckpt_path), f"ckpt_path is required: the checkpoint to export, {_CKPT_HINT}")
        wandb_tags("tags", self.tags)
        if "onnx" in self.export.formats:
            others = [name for name in self.export.formats if name != "onnx"] or ["pt2"]
            extras.require("export.formats=onnx", ONNX, instead=f"export.formats=[{','.join(others)}]")


@dataclass
class InferOptions:
    top_k: int = 5  # classification: labels kept per input; language models: sample from the k likeliest tokens
    batch_size: int = 64
    max_new_tokens: int = 200  # language models: tokens generated after the prompt
    temperature: float = 0.8  # language models: < 1 sharper, > 1 more random
    seed: int = 0  # language models: the sampling is reproducible by seed
    # An exported model is refused if the manifest does not list it or its sha256 differs from the one
    # export_manifest.json verified (swapped or edited after export). true: run it anyway, with a warning.
    allow_modified_artifact: bool = False
    # Images: true resizes every input to the training size, for a model that needs it (a classifier with a
    # flattening head). false keeps each input's own size (a fully convolutional model). null = false when the
    # model's height and width axes are dynamic (the task's or the export's dynamic_dims), else true.
    resize: bool | None = None

    def __post_init__(self) -> None:
        at_least("infer.top_k", self.top_k, 1)
        at_least("infer.batch_size", self.batch_size, 1)
        at_least("infer.max_new_tokens", self.max_new_tokens, 1)
        at_least("infer.temperature", self.temperature, 0, strict=True)
        seed("infer.seed", self.seed)


@dataclass
class InferConfig:
    task_name: str = "infer"
    # Required: a checkpoint (.pt, eager), or an exported model.onnx / model.pt2 / model.torchscript.pt next to its
    # export_manifest.json (or another file that manifest lists, e.g. an export step's).
    ckpt_path: str | None = None
    # Images (a file, a folder searched recursively, a glob "imgs/*.png"), a .npy / .pt tensor, or table rows
    # (.csv / .npy).
    input: str | None = None
    prompt: str | None = None  # language models: the text to continue (instead of input)
    device: str = "auto"  # auto | cpu | cuda | mps (eager checkpoints and onnxruntime's CUDA provider)
    tags: list[str] = field(default_factory=list)
    infer: InferOptions = field(default_factory=InferOptions)
    paths: PathsConfig = field(default_factory=PathsConfig)
    logger: LoggerConfig = field(default_factory=logger_config)

    def __post_init__(self) -> None:
        _require(
            bool(self.ckpt_path),
            f"ckpt_path is required: a checkpoint ({_CKPT_HINT}) or an exported model.onnx / model.pt2",
        )
        _require(
            bool(self.input) or self.prompt is not None,
            "input is required: an image, a folder, a glob like 'imgs/*.png', a .npy/.pt/.csv file "
            "(or prompt='...' for a language model)",
        )
        _one_of("device", self.device, ("auto", "cpu", "cuda", "mps"))
        wandb_tags("tags", self.tags)
        if str(self.ckpt_path).endswith(".onnx"):
            extras.require("an ONNX ckpt_path", ("onnxruntime",), instead="the model.pt2 or the .pt checkpoint")
