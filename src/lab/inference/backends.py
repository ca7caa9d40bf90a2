"""Runners, one per model format, that map a batch of model inputs to outputs.

Inputs are normalized images, table rows or int64 tokens. Export's parity check and scripts/infer.py use the same
runners, so what was verified at export time is what runs at inference time. Artifacts run as their users run
them: onnxruntime's InferenceSession, `torch.export.load(...).module()`, `torch.jit.load`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from lab.errors import UserError
from lab.exporting.writers import axis_name
from lab.tasks.outputs import Layout, apply


class Backend(Protocol):
    name: str

    def __call__(self, inputs: torch.Tensor) -> Any:
        """Return the outputs as the model returns them (`lab.tasks.outputs`), fp32 on the CPU."""


# An exported model's input shape as the file declares it: an int per fixed axis, a name per dynamic one (batch,
# sequence, height, width). A batch of another shape is refused with a clear error before the runtime fails on it.
InputShape = list[int | str]


def shape_text(shape: InputShape | tuple[int, ...]) -> str:
    return f"({', '.join(map(str, shape))})"


def fits(inputs_shape: tuple[int, ...] | list, declared: InputShape) -> bool:
    """Check whether a shape fits the declared one: the same number of axes, equal sizes on the fixed ones."""
    return len(inputs_shape) == len(declared) and all(
        not isinstance(d, int) or d == size for d, size in zip(declared, inputs_shape)
    )


def check_shape(path: Path, inputs: torch.Tensor, declared: InputShape | None) -> None:
    if declared is not None and not fits(tuple(inputs.shape), declared):
        raise UserError(
            f"{path.name} takes inputs of shape {shape_text(declared)}; got {shape_text(tuple(inputs.shape))}"
        )


class ModuleBackend:
    """Run `module` on `device` without autograd, returning fp32 outputs on the CPU. The torch runners share this."""

    module: Any
    device: torch.device
    input_shape: InputShape | None = None  # none declared: a module, a traced module (a .pt2 sets its own)

    @torch.inference_mode()
    def __call__(self, inputs: torch.Tensor) -> Any:
        return apply(lambda output: output.float().cpu(), self.module(inputs.to(self.device)))


class EagerBackend(ModuleBackend):
    """Run the PyTorch module itself, in eval mode."""

    name = "eager"

    def __init__(self, model: nn.Module, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        self.module = model.eval().to(self.device)


class OnnxBackend:
    """Run an .onnx file through onnxruntime, with CUDA's execution provider when asked for and installed.
    onnxruntime gives a flat list of outputs. `layout` (from the export manifest) puts them back into the model's
    tuple or dict; without one, a file of several outputs gives a tuple."""

    name = "onnx"

    def __init__(self, path: str | Path, device: torch.device | None = None, layout: Layout | None = None) -> None:
        import onnxruntime as ort

        available = ort.get_available_providers()
        wanted = ["CUDAExecutionProvider"] if device is not None and device.type == "cuda" else []
        providers = [p for p in wanted if p in available] + ["CPUExecutionProvider"]
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only; ORT's warnings about unused initializers are noise here
        try:
            self.session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        except Exception as err:  # onnxruntime raises its own Fail / InvalidGraph / NoSuchFile types
            raise UserError(f"onnxruntime cannot load {path}: {str(err).splitlines()[0]}") from err
        self.path = Path(path)
        graph_input = self.session.get_inputs()[0]
        self.input_name = graph_input.name
        self.input_shape: InputShape = [d if isinstance(d, int) else str(d) for d in graph_input.shape]
        names = tuple(output.name for output in self.session.get_outputs())
        self.layout = layout or Layout("tensor" if len(names) == 1 else "tuple", names)
        if len(names) != len(self.layout.names):
            raise UserError(
                f"{self.path.name} has outputs {names}; its manifest names {self.layout.names}: export again"
            )

    def __call__(self, inputs: torch.Tensor) -> Any:
        check_shape(self.path, inputs, self.input_shape)
        tensor = inputs.detach().cpu()
        array = np.ascontiguousarray((tensor.float() if tensor.is_floating_point() else tensor).numpy())  # int64 tokens
        try:
            results = self.session.run(None, {self.input_name: array})
        except Exception as err:  # onnxruntime's InvalidArgument, Fail...: a multi-line report, traceback useless
            first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise UserError(
                f"onnxruntime cannot run {self.path.name} on inputs of shape {shape_text(array.shape)} "
                f"({array.dtype}): {first}"
            ) from err
        return self.layout.pack([torch.from_numpy(result) for result in results])


class ExportedProgramBackend(ModuleBackend):
    """Run a .pt2 file from `torch.export.save`, as the GraphModule `torch.export.load(...).module()` gives."""

    name = "pt2"

    def __init__(self, path: str | Path, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        try:
            with _weights_only_loads():
                program = torch.export.load(str(path))
        except Exception as err:
            why = str(err).splitlines()[0]
            if why.startswith("Weights only load failed"):
                why = "a pickled part holds more than tensors and plain data (it could run code): not loaded"
            raise UserError(
                f"torch.export.load cannot read {path}: {why}; export it again with scripts/export.py"
            ) from err
        self.path = Path(path)
        self.input_shape = _program_input_shape(program)
        if self.device.type != "cpu":
            from torch.export.passes import move_to_device_pass

            # This also rewrites the graph's device constants, which moving the parameters alone would miss
            program = move_to_device_pass(program, self.device)
        self.module = program.module()

    def __call__(self, inputs: torch.Tensor) -> Any:
        check_shape(self.path, inputs, self.input_shape)  # else a guard's AssertionError from inside the graph
        return super().__call__(inputs)


@contextlib.contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Force torch.export.load to read weights-only, so a crafted .pt2 fails to load instead of running code.
    When the weights-only read fails, torch.export.load retries with weights_only=False, running whatever the file
    names. torch reads the forcing variable at each load. Its warning and traceback are silenced; our error says it."""
    names = ("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    saved = {name: os.environ.pop(name, None) for name in names}
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    export_log = logging.getLogger("torch.export")
    level = export_log.level
    export_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():  # the weights-only unpickler's note on protocol 4, which torch itself writes
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            yield
    finally:
        export_log.setLevel(level)
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def _program_input_shape(program: Any) -> InputShape | None:
    """Return the first user input's shape as the exported graph holds it: ints, and names for dynamic axes."""
    names = program.graph_signature.user_inputs
    node = next((n for n in program.graph.nodes if n.op == "placeholder" and names and n.name == names[0]), None)
    value = node.meta.get("val") if node is not None else None
    if not isinstance(value, torch.Tensor):
        return None
    ndim = len(value.shape)
    return [int(d) if isinstance(d, int) else axis_name(axis, ndim) for axis, d in enumerate(value.shape)]


class TorchScriptBackend(ModuleBackend):
    """Run a TorchScript archive (`torch.jit.load`). TorchScript is deprecated, and kept for old deployments."""

    name = "torchscript"

    def __init__(self, path: str | Path, device: torch.device | None = None) -> None:
        self.device = device or torch.device("cpu")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=FutureWarning)
            try:
                self.module = torch.jit.load(str(path), map_location=self.device).eval()
            except Exception as err:
                raise UserError(f"torch.jit.load cannot read {path}: {str(err).splitlines()[0]}") from err


def artifact_backend(path: str | Path, device: torch.device | None = None, layout: Layout | None = None) -> Backend:
    """Return the runner for an exported file, by its suffix.
    `layout` is what the model returns, needed for .onnx only (.pt2 and TorchScript keep the model's structure)."""
    path = Path(path)
    if path.suffix == ".onnx":
        return OnnxBackend(path, device, layout)
    if path.suffix == ".pt2":
        return ExportedProgramBackend(path, device)
    if path.name.endswith(".torchscript.pt"):
        return TorchScriptBackend(path, device)
    raise UserError(f"{path}: not an exported model (.onnx, .pt2 or .torchscript.pt)")
