"""Any input axis dynamic at export: height and width of a fully convolutional model, named in the files, and the
parity check's second size along each dynamic axis, which a model exported with a baked-in size fails."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lab.errors import UserError
from lab.exporting.parity import compare, sample_batches
from lab.exporting.writers import write_onnx, write_pt2, write_torchscript
from lab.inference.backends import EagerBackend, ExportedProgramBackend, OnnxBackend, TorchScriptBackend

HW = (0, 2, 3)


class Segmenter(nn.Module):
    """Fully convolutional: a strided conv down, back up to the input's own size. `baked`: the size taken as Python
    ints, which a trace records as constants (a model exported with its traced H/W baked in)."""

    def __init__(self, baked: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.down = nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.head = nn.Conv2d(4, 3, 1)
        self.baked = baked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(torch.relu(self.down(x)))
        size = (int(x.shape[2]), int(x.shape[3])) if self.baked else x.shape[-2:]
        return F.interpolate(y, size=size, mode="nearest")


def _loader() -> DataLoader:
    torch.manual_seed(1)
    return DataLoader(TensorDataset(torch.randn(6, 1, 8, 8), torch.zeros(6)), batch_size=4)


def test_parity_adds_a_second_size_along_every_dynamic_axis() -> None:
    shapes = [tuple(b.shape) for b in sample_batches(_loader(), 6, HW)]
    assert shapes == [(4, 1, 8, 8), (2, 1, 8, 8), (1, 1, 8, 8), (3, 1, 16, 8), (3, 1, 8, 16)]
    assert [tuple(b.shape) for b in sample_batches(_loader(), 6, (0,))][-1] == (1, 1, 8, 8)
    tokens = DataLoader(TensorDataset(torch.zeros(4, 6, dtype=torch.long), torch.zeros(4)), batch_size=4)
    assert [tuple(b.shape) for b in sample_batches(tokens, 4, (0, 1))][-1] == (3, 3)  # shorter: bounded
    with pytest.raises(UserError, match=r"dynamic axes \[0, 4\] do not fit inputs of shape \(4, 1, 8, 8\)"):
        sample_batches(_loader(), 6, (0, 4))


def test_a_model_traced_with_its_height_and_width_baked_in_fails_parity_when_they_are_dynamic(tmp_path) -> None:
    model = Segmenter(baked=True).eval()
    eager = EagerBackend(model)
    for dims, passes in (((0,), True), (HW, False)):
        batches = sample_batches(_loader(), 6, dims)
        with pytest.warns(torch.jit.TracerWarning):  # int(x.shape[2]) becomes a constant in the trace
            write_torchscript(model, batches[0][:2], tmp_path / "model.torchscript.pt", None, dims)
        traced = TorchScriptBackend(tmp_path / "model.torchscript.pt")
        parity = compare(traced, batches, [eager(b) for b in batches], tolerance=1e-4)
        assert parity.passed is passes, parity
    assert parity.max_abs_diff == float("inf") and "(3, 1, 16, 8)" in parity.error
    assert [8, 16, 8] not in parity.input_shapes and [1, 16, 8] in parity.input_shapes


@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_a_fully_convolutional_model_exports_with_dynamic_height_and_width(tmp_path, fmt) -> None:
    model = Segmenter().eval()
    batches = sample_batches(_loader(), 6, HW)
    writer, backend_class, path = {
        "pt2": (write_pt2, ExportedProgramBackend, tmp_path / "model.pt2"),
        "onnx": (write_onnx, OnnxBackend, tmp_path / "model.onnx"),
    }[fmt]
    writer(model, batches[0][:2], path, None, HW)
    backend = backend_class(path)
    assert backend.input_shape[1] == 1 and all(isinstance(d, str) for d in backend.input_shape[::2])
    eager = EagerBackend(model)
    parity = compare(backend, batches, [eager(b) for b in batches], tolerance=1e-4)
    assert parity.passed and parity.error is None, parity
    assert backend(torch.randn(1, 1, 20, 12)).shape == (1, 3, 20, 12)  # a size parity did not run either
    if fmt == "pt2":
        assert backend.input_shape == ["batch", 1, "height", "width"]
