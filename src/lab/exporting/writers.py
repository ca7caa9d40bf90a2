"""Model files from a plain eval-mode module: ONNX (dynamo exporter), torch.export (.pt2), TorchScript.

Every writer gets the module `lab.workflows.restore` built (never a DDP / torch.compile wrapper, never
channels_last) and puts it in eval mode itself, so dropout is off and BatchNorm uses its running statistics in every
artifact. The axes the task's `dynamic_dims` (or `export.dynamic_dims`) name accept any size in ONNX and torch.export
(the batch always; a token sequence; the height and width of a fully convolutional model's images); the parity check
then runs sizes other than the traced ones along each of them. A model of several outputs (a tuple or dict:
lab.tasks.outputs) keeps them: named ONNX outputs, the same structure from pt2 and TorchScript.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.errors import UserError
from lab.files import write_error
from lab.tasks.outputs import INPUT_NAME, OUTPUT_NAME

log = logging.getLogger(__name__)

# Not 1: torch.export specializes sizes 0 and 1, so a batch-1 example would pin the batch axis to 1.
EXAMPLE_BATCH = 2
_PROTOBUF_LIMIT = 2**31 - 2**26  # ONNX files are protobufs (2 GiB max); bigger weights go to a .data file


@dataclass
class Written:
    files: list[Path]  # the artifact first, then companions (ONNX external weights)
    opset: int | None = None
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def quiet_logs(*names: str) -> Iterator[None]:
    """Raise these loggers (the root logger when none is named) to WARNING for the duration: the ONNX
    toolchain reports every optimization pass at INFO, dozens of lines that would bury the parity figures."""
    loggers = [logging.getLogger(name) for name in names] or [logging.getLogger()]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


# (model, example, path, opset, dims[, names]): the output names come only for a model of several outputs, so a
# writer a fork wrapped with the first five keeps working for one-tensor models
Writer = Callable[..., Written]
Dims = tuple[int, ...]
Names = Sequence[str]  # an output name each, in the model's order
_IMAGE_AXES = ("batch", "channels", "height", "width")


def axis_name(dim: int, ndim: int) -> str:
    """The name of input axis `dim` of an `ndim`-d input, in the files and the manifest: batch; sequence (token ids
    (N, L)); channels, height, width ((N, C, H, W) images); dim<d> otherwise."""
    if dim == 0:
        return "batch"
    if ndim == 2 and dim == 1:
        return "sequence"
    return _IMAGE_AXES[dim] if ndim == 4 and dim < 4 else f"dim{dim}"


def axis_limit(example: torch.Tensor, dim: int) -> int | None:
    """The largest size dynamic axis `dim` may take: a token sequence up to the example's length (the context the
    model was built for, e.g. its position embeddings); any other axis is unbounded."""
    return int(example.shape[dim]) if example.ndim == 2 and dim == 1 else None


def check_dims(example: torch.Tensor, dims: tuple[int, ...]) -> None:
    """A UserError when `dims` names an axis the input does not have."""
    wrong = [d for d in dims if not 0 <= d < example.ndim]
    if wrong or 0 not in dims:
        raise UserError(
            f"dynamic axes {list(dims)} do not fit inputs of shape {tuple(example.shape)}: give axes "
            f"0..{example.ndim - 1} including 0, the batch (task.dynamic_dims or export.dynamic_dims)"
        )


def dynamic_shapes(example: torch.Tensor, dims: tuple[int, ...]) -> tuple[dict[int, Any]]:
    """The input axes that accept any size (torch.export's dynamic shapes; the ONNX exporter turns them into dynamic
    axes): the batch from 1, a token sequence from 1 up to the example's length, named `Dim`s as before; any other
    axis (height, width) `Dim.DYNAMIC`, whose range torch.export derives from the model (a stride-2 layer needs
    a height of at least 3, say) instead of refusing a range the user could not know."""
    axes: dict[int, Any] = {}
    for dim in dims:
        name, limit = axis_name(dim, example.ndim), axis_limit(example, dim)
        if dim == 0 or limit is not None:
            axes[dim] = torch.export.Dim(name, min=1, max=limit) if limit else torch.export.Dim(name, min=1)
        else:
            axes[dim] = torch.export.Dim.DYNAMIC
    return (axes,)


def write_onnx(
    model: nn.Module, example: torch.Tensor, path: Path, opset: int | None = None, dims: Dims = (0,), names: Names = ()
) -> Written:
    """torch.onnx.export with the dynamo exporter (torch.export graph -> ONNX via onnxscript). `names`: a name per
    output of a model of several, in its order (a dict's keys' order, as the exporter flattens it)."""
    import onnx

    model.eval()
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    with quiet_logs("onnxscript", "onnx_ir", "torch.onnx"):
        torch.onnx.export(
            model,
            (example,),
            str(path),
            dynamo=True,
            dynamic_shapes=dynamic_shapes(example, dims),
            input_names=[INPUT_NAME],
            output_names=list(names or [OUTPUT_NAME]),
            opset_version=opset,
            external_data=weight_bytes > _PROTOBUF_LIMIT,  # one self-contained file whenever it fits
            verbose=False,
        )
    header = onnx.load(str(path), load_external_data=False)
    default_opset = next(o.version for o in header.opset_import if o.domain in ("", "ai.onnx"))
    data_file = path.with_name(path.name + ".data")
    return Written([path, *([data_file] if data_file.is_file() else [])], opset=default_opset)


def write_pt2(
    model: nn.Module, example: torch.Tensor, path: Path, opset: int | None = None, dims: Dims = (0,), names: Names = ()
) -> Written:
    """torch.export.export + torch.export.save: a graph that runs without the model's Python code (and returns the
    model's tuple or dict: no `names` needed)."""
    model.eval()
    program = torch.export.export(model, (example,), dynamic_shapes=dynamic_shapes(example, dims))
    torch.export.save(program, str(path))
    return Written([path])


def write_torchscript(
    model: nn.Module, example: torch.Tensor, path: Path, opset: int | None = None, dims: Dims = (0,), names: Names = ()
) -> Written:
    """torch.jit.trace: TorchScript is deprecated in PyTorch; kept for runtimes that still load it (C++ libtorch)."""
    note = "TorchScript is deprecated in PyTorch; exported for existing deployments only, prefer pt2 or onnx"
    log.warning("%s", note)
    model.eval()
    with warnings.catch_warnings():
        # the line above says it once; torch repeats it for every traced method
        warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=DeprecationWarning)
        # trace rather than script: forward may hold any Python; parity then checks the trace generalizes.
        # strict=False lets a model return a dict or list (a tensor or tuple traces the same either way)
        traced = torch.jit.trace(model, example, strict=False)
        traced.save(str(path))
    return Written([path], notes=[note])


# format -> (file name in the run dir, writer). The export workflow looks writers up here at call time.
WRITERS: dict[str, tuple[str, Writer]] = {
    "onnx": ("model.onnx", write_onnx),
    "pt2": ("model.pt2", write_pt2),
    "torchscript": ("model.torchscript.pt", write_torchscript),
}


def write(
    fmt: str,
    model: nn.Module,
    example: torch.Tensor,
    folder: Path,
    opset: int | None = None,
    dims: tuple = (0,),
    names: Names = (),
) -> Written:
    """Write one format into `folder` with `dims` of the input dynamic (and `names` for the outputs of a model of
    several); an exporter failure becomes one line (its traceback goes to the log)."""
    name, writer = WRITERS[fmt]
    named = (tuple(names),) if names else ()
    try:
        return writer(model, example, folder / name, opset, tuple(dims), *named)
    except Exception as err:
        if write_error(err, folder) is not None:
            raise  # the disk, not the exporter: lab.files.staged names the file and the fix
        log.exception("%s export failed", fmt)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"{fmt} export failed: {first} (full report in the run's export.log; "
            f"drop {fmt} from export.formats to export the others)"
        ) from err
