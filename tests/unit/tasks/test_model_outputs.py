"""What a model may return (lab.tasks.outputs), in process: the check and its one-line refusals (at the first training
step too), a tuple and a dict model exported in every format with each runner giving the model's structure back,
parity per output, the manifest's outputs, and infer's column group per output."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from helpers import in_process_trainer
from lab.errors import UserError
from lab.exporting import manifest
from lab.exporting.parity import compare
from lab.exporting.writers import EXAMPLE_BATCH, write
from lab.inference.backends import EagerBackend, artifact_backend
from lab.inference.inputs import Inputs
from lab.inference.predict import write_predictions
from lab.tasks import outputs as model_outputs
from lab.tasks.base import BaseTask, InferContext
from lab.tasks.outputs import per_input

T = torch.zeros(2, 3)


class Heads(nn.Module):
    """Class logits and a box from one trunk, returned as `returns` says: tuple, list, dict or nested."""

    def __init__(self, returns: str = "tuple") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk, self.cls, self.box = nn.Linear(6, 8), nn.Linear(8, 3), nn.Linear(8, 4)
        self.returns = returns

    def forward(self, x):
        h = self.trunk(x).relu()
        cls, box = self.cls(h), self.box(h)
        return {
            "tuple": (cls, box),
            "list": [cls, box],
            "dict": {"cls": cls, "box": box},
            "nested": {"cls": cls, "box": (box, box)},
        }[self.returns]


class Named(BaseTask):
    output_names = ("logits", "boxes")

    def loss(self, outputs, targets):
        logits, box = outputs.values() if isinstance(outputs, dict) else outputs
        return F.cross_entropy(logits.float(), targets[0], reduction="sum") + (box - targets[1]).square().sum()


# --------------------------------------------------------------------------- the check
def test_a_tensor_tuple_list_or_dict_is_named_by_the_task_or_by_its_keys():
    assert model_outputs.check(T) == model_outputs.Layout("tensor", ("output",))
    assert model_outputs.check((T, T)) == model_outputs.Layout("tuple", ("output_0", "output_1"))
    assert model_outputs.check([T, T], Named()) == model_outputs.Layout("list", ("logits", "boxes"))
    assert model_outputs.check({"cls": T, "box": T}, Named()).names == ("cls", "box")  # a dict's keys name it
    layout = model_outputs.check({"cls": T, "box": T})
    assert (
        layout.pack([T, T + 1])["box"].sum() == 6 and model_outputs.kind({"cls": T, "box": T}) == "a dict of cls, box"
    )


class Three(BaseTask):
    output_names = ("a", "b", "c")


class Twice(BaseTask):
    output_names = ("a", "a")


@pytest.mark.parametrize(
    ("outputs", "task", "message"),
    [
        (None, None, "the model returns None: a model may return a tensor, a tuple or list of tensors, or a dict"),
        ((), None, "the model returns an empty tuple: "),
        ((T, None), None, "the model's output [1] is None: "),
        ({"cls": T, "box": (T, T)}, None, "the model's output ['box'] is a tuple of 2: "),
        ({"cls": T, "box": {"xy": T}}, None, "the model's output ['box'] is a dict of xy: "),
        ({3: T}, None, "the model's dict key 3 cannot name an exported output: "),
        ({"input": T}, None, "the model's dict key 'input' cannot name an exported output: "),
        ((T, T), Three(), "Three.output_names has 3 names for the model's 2 outputs: give one name per output"),
        ((T, T), Twice(), "Twice.output_names ['a', 'a'] repeats a name: "),
    ],
    ids=["none", "empty", "a-none", "nested-tuple", "nested-dict", "number-key", "reserved", "names", "repeated"],
)
def test_what_cannot_be_exported_is_refused_in_one_line_naming_the_fix(outputs, task, message):
    with pytest.raises(UserError) as refused:
        model_outputs.check(outputs, task)
    text = str(refused.value)
    assert text.startswith(message) and "\n" not in text
    assert any(fix in text for fix in ("make its forward return", "use letters", "give one name", "give each"))


def test_a_nested_output_is_refused_at_the_first_step_before_any_update(compose, tmp_path: Path):
    model = Heads("nested")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    group = [(torch.randn(4, 6), (torch.tensor([0, 1, 2, 0]), torch.zeros(4, 4)))]
    trainer = in_process_trainer(compose(), model, Named(), [group], tmp_path, total_steps=1)
    try:
        with pytest.raises(UserError, match=r"^the model's output \['box'\] is a tuple of 2: "):
            trainer.train_step(group)
    finally:
        trainer.tracker.finish()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

    model.returns = "tuple"  # what the task's loss takes: it trains
    trainer = in_process_trainer(compose(), model, Named(), [group], tmp_path / "ok", total_steps=1)
    trainer.train_step(group)
    trainer.tracker.finish()
    assert not torch.equal(model.cls.weight, before["cls.weight"])


# --------------------------------------------------------------------------- export and parity
@pytest.mark.parametrize("returns", ["tuple", "dict"])
def test_every_format_exports_each_output_named_and_runs_back_to_the_models_structure(tmp_path: Path, returns):
    model = Heads(returns).eval()
    batches = [torch.randn(5, 6), torch.randn(1, 6)]
    eager = EagerBackend(model)
    reference = [eager(b) for b in batches]
    layout = model_outputs.check(reference[0], Named())
    names = ("logits", "boxes") if returns == "tuple" else ("cls", "box")
    assert layout.names == names
    example = batches[0][:EXAMPLE_BATCH]
    for fmt in ("onnx", "pt2", "torchscript"):
        written = write(fmt, model, example, tmp_path, names=layout.names)
        runner = artifact_backend(written.files[0], layout=layout)
        got = runner(batches[0])
        assert type(got) is type(reference[0]), fmt  # tuple or dict, from onnxruntime's flat list too
        for out, ref in zip(model_outputs.tensors(got), model_outputs.tensors(reference[0])):
            torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
        parity = compare(runner, batches, reference, 1e-4, layout=layout)
        assert parity.passed and set(parity.as_dict()["max_abs_diff_per_output"]) == set(names), fmt
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert tuple(o.name for o in session.get_outputs()) == names
    assert [o.shape for o in session.get_outputs()] == [["batch", 3], ["batch", 4]]

    spec = _manifest(example, reference[0], layout)
    assert "output" not in spec and spec["output_structure"] == returns
    assert spec["outputs"] == [
        {"name": names[0], "shape": ["batch", 3], "dtype": "float32"},
        {"name": names[1], "shape": ["batch", 4], "dtype": "float32"},
    ]
    assert manifest.output_layout(spec) == layout


def _manifest(example: torch.Tensor, output, layout) -> dict:
    return manifest.build(
        meta={"input_shape": [6], "num_outputs": 3},
        task_config={},
        example=example,
        output=output,
        dynamic_dims=(0,),
        model_config={},
        source_run={},
        provenance={},
        artifacts={},
        failed={},
        opset=None,
        tolerance=1e-4,
        sections={},
        layout=layout,
    )


def test_one_tensor_keeps_its_manifest_keys_and_parity_figures():
    model = nn.Linear(6, 3)
    batches = [torch.randn(4, 6)]
    eager = EagerBackend(model)
    reference = [eager(b) for b in batches]
    parity = compare(eager, batches, reference, 1e-4)
    assert "max_abs_diff_per_output" not in parity.as_dict()
    spec = _manifest(batches[0][:2], reference[0], model_outputs.check(reference[0]))
    assert spec["output"] == {"name": "output", "shape": ["batch", 3], "dtype": "float32"} and "outputs" not in spec
    assert manifest.output_layout(spec) is None


def test_parity_names_the_output_that_differs_or_a_structure_that_changed():
    model = Heads("dict").eval()
    batches = [torch.randn(4, 6)]
    eager = EagerBackend(model)
    reference = [eager(b) for b in batches]

    def shifted_box(x):
        out = eager(x)
        return {**out, "box": out["box"] + 1e-2}

    parity = compare(shifted_box, batches, reference, 1e-4)
    assert not parity.passed and parity.max_abs_diff_per_output["cls"] == 0
    assert parity.max_abs_diff_per_output["box"] == pytest.approx(1e-2, rel=1e-3)

    as_tuple = compare(lambda x: tuple(eager(x).values()), batches, reference, 1e-4)
    assert as_tuple.error == "inputs of shape (4, 6): outputs a tuple of 2, eager's a dict of cls, box"
    assert as_tuple.max_abs_diff_per_output == {"cls": float("inf"), "box": float("inf")}
    narrow = compare(lambda x: {**eager(x), "box": eager(x)["box"][:, :2]}, batches, reference, 1e-4)
    assert narrow.error == "inputs of shape (4, 6): output 'box' (4, 2), eager's (4, 4)"


# --------------------------------------------------------------------------- infer
def _context(tmp_path: Path) -> InferContext:
    rows = tmp_path / "rows.npy"
    np.save(rows, np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32))
    cfg = OmegaConf.create({"input": str(rows), "infer": {"batch_size": 2}})
    return InferContext(cfg, {"input_shape": [6], "num_outputs": 3}, tmp_path, Inputs.read, resize=True)


@pytest.mark.parametrize(("returns", "task"), [("tuple", BaseTask()), ("tuple", Named()), ("dict", Named())])
def test_default_records_give_each_output_its_column_group(tmp_path: Path, returns, task):
    context = _context(tmp_path)
    predictions = task.predict(EagerBackend(Heads(returns)), context)
    names = {
        "tuple": ("output_0", "output_1") if type(task) is BaseTask else ("logits", "boxes"),
        "dict": ("cls", "box"),
    }
    first, second = names[returns]
    assert len(predictions.records) == 5 and set(predictions.records[0]) == {"path", first, second}
    csv_path, _ = write_predictions(predictions.records, tmp_path, predictions.skipped, {})
    with csv_path.open() as f:
        header = next(csv.reader(f))
    assert header == ["path", *(f"{first}_{i}" for i in range(3)), *(f"{second}_{i}" for i in range(4))]


def test_a_big_output_goes_to_its_own_file_and_one_without_a_row_per_input_is_refused(tmp_path: Path):
    task = BaseTask()
    task.max_csv_outputs = 3  # the 4 box values go to outputs/<index>_output_1.npy
    predictions = task.predict(EagerBackend(Heads("tuple")), _context(tmp_path))
    record = predictions.records[4]
    assert record["output_1_file"] == "outputs/4_output_1.npy" and record["output_1_shape"] == [4]
    assert np.load(tmp_path / record["output_1_file"]).shape == (4,) and len(record["output_0"]) == 3

    with pytest.raises(UserError) as refused:
        per_input((torch.zeros(2, 3), torch.zeros(())), 2, Named())
    assert str(refused.value) == (
        "output 'boxes' has shape (), not one row per input (2 inputs): override Named.predict(backend, context) "
        "to write its records"
    )
