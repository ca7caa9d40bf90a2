"""Write model files from a plain eval-mode module: ONNX (dynamo exporter), torch.export (.pt2), TorchScript.

Every writer gets the module `lab.workflows.restore` built (no DDP, torch.compile or channels_last) and puts it in
eval mode itself. The axes named by `dynamic_dims` accept any size in ONNX and torch.export.
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
_PROTOBUF_LIMIT = 2**31 - 2**26  # ONNX files are protobufs (2 GiB max), so bigger weights go to a .data file


@dataclass
class Written:
    files: list[Path]  # the artifact first, then companions (ONNX external weights)
    opset: int | None = None
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def quiet_logs(*names: str) -> Iterator[None]:
    """Raise these loggers (or the root logger) to WARNING for the duration.

    The ONNX toolchain logs every optimization pass at INFO, dozens of lines that would bury the parity figures."""
    loggers = [logging.getLogger(name) for name in names] or [logging.getLogger()]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


# (model, example, path, opset, dims[, names]). Names are passed only for a model with several outputs, so a
# fork's writer that takes the first five keeps working for one-tensor models.
Writer = Callable[..., Written]
Dims = tuple[int, ...]
Names = Sequence[str]  # an output name each, in the model's order
_IMAGE_AXES = ("batch", "channels", "height", "width")


def axis_name(dim: int, ndim: int) -> str:
    """Name input axis `dim` of an `ndim`-d input: batch; sequence for token ids (N, L); channels, height, width
    for (N, C, H, W) images; else dim<d>."""
    if dim == 0:
        return "batch"
    if ndim == 2 and dim == 1:
        return "sequence"
    return _IMAGE_AXES[dim] if ndim == 4 and dim < 4 else f"dim{dim}"


def axis_limit(example: torch.Tensor, dim: int) -> int | None:
    """Return the largest size dynamic axis `dim` may take: a token sequence's is the example's length (the
    context the model was built for); others are unbounded (None)."""
    return int(example.shape[dim]) if example.ndim == 2 and dim == 1 else None


def check_dims(example: torch.Tensor, dims: tuple[int, ...]) -> None:
    """Raise a UserError if `dims` names an axis the input does not have, or leaves out the batch."""
    wrong = [d for d in dims if not 0 <= d < example.ndim]
    if wrong or 0 not in dims:
        raise UserError(
            f"dynamic axes {list(dims)} do not fit inputs of shape {tuple(example.shape)}: give axes "
            f"0..{example.ndim - 1} including 0, the batch (task.dynamic_dims or export.dynamic_dims)"
        )


def dynamic_shapes(example: torch.Tensor, dims: tuple[int, ...]) -> tuple[dict[int, Any]]:
    """Return torch.export's dynamic shapes for the input axes that accept any size.

    The batch takes sizes from 1, and a token sequence from 1 up to the example's length, as named `Dim`s. Other
    axes (height, width) get `Dim.DYNAMIC`, so torch.export derives their range from the model instead of refusing
    a range the user could not know (a stride-2 layer needs a height of at least 3, say)."""
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
    """Export to ONNX with the dynamo exporter. `names` names each of several outputs, in order (a dict's keys)."""
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
    """Export a torch.export graph that runs without the model's Python code and returns its own tuple or dict."""
    model.eval()
    program = torch.export.export(model, (example,), dynamic_shapes=dynamic_shapes(example, dims))
    torch.export.save(program, str(path))
    return Written([path])


def write_torchscript(
    model: nn.Module, example: torch.Tensor, path: Path, opset: int | None = None, dims: Dims = (0,), names: Names = ()
) -> Written:
    """Trace to TorchScript, which PyTorch deprecated; kept for runtimes that still load it (C++ libtorch)."""
    note = "TorchScript is deprecated in PyTorch; exported for existing deployments only, prefer pt2 or onnx"
    log.warning("%s", note)
    model.eval()
    with warnings.catch_warnings():
        # the line above says it once; torch repeats it for every traced method
        warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=DeprecationWarning)
        # Trace rather than script, since forward may hold any Python; parity checks the trace generalizes.
        # strict=False lets a model return a dict or list.
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
    """Write one format into `folder`. An exporter failure becomes one line; its traceback goes to the log."""
    name, writer = WRITERS[fmt]
    named = (tuple(names),) if names else ()
    try:
        return writer(model, example, folder / name, opset, tuple(dims), *named)
    except Exception as err:
        if write_error(err, folder) is not None:
            raise  # the disk failed, not the exporter; lab.files.staged names the file and the fix
        log.exception("%s export failed", fmt)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"{fmt} export failed: {first} (full report in the run's export.log; "
            f"drop {fmt} from export.formats to export the others)"
        ) from err
