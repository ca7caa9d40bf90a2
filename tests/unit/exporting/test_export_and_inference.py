"""lab.exporting and lab.inference in process: parity checks that can fail, eval-mode writers, input discovery,
the shared preprocessing, batched top-k."""

from __future__ import annotations

import math
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from lab.data.common import make_meta
from lab.data.transforms import eval_transform
from lab.errors import UnreadableInput, UserError
from lab.exporting.parity import compare, sample_batches
from lab.exporting.writers import EXAMPLE_BATCH, write_pt2, write_torchscript
from lab.inference.backends import EagerBackend, ExportedProgramBackend, TorchScriptBackend
from lab.inference.inputs import Inputs, discover
from lab.models.cnn import SmallCNN
from lab.tasks.classification import Classification
from lab.tasks.outputs import top_k_records

META = make_meta(3, 1, 8, [0.5], [0.25], ["cat", "dog", "emu"])


def _batches() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(4, 1, 8, 8), torch.randn(3, 1, 8, 8), torch.randn(1, 1, 8, 8)]


class Shifted:
    """A backend that adds `delta` to one logit of every sample: a broken export."""

    name = "shifted"

    def __init__(self, backend, delta: float) -> None:
        self.backend, self.delta = backend, delta

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.backend(x).clone()
        out[:, 0] += self.delta
        return out


# --------------------------------------------------------------------------- parity
def test_parity_passes_for_the_same_model_and_fails_above_the_tolerance() -> None:
    eager = EagerBackend(SmallCNN(1, [4, 8], 3, dropout=0.0))
    batches = _batches()
    reference = [eager(b) for b in batches]
    same = compare(eager, batches, reference, tolerance=1e-4, agreement=Classification(3).agreement)
    assert same.passed and same.max_abs_diff == 0 and same.top1_agreement == 1 and same.samples == 8
    assert compare(eager, batches, reference, tolerance=1e-4).top1_agreement is None  # no decision
    assert same.batch_sizes == [1, 3, 4]

    broken = compare(Shifted(eager, 1e-3), batches, reference, tolerance=1e-4)
    assert not broken.passed and broken.max_abs_diff == pytest.approx(1e-3, rel=1e-3)
    assert broken.as_dict()["passed"] is False
    assert compare(Shifted(eager, 1e-3), batches, reference, tolerance=1e-2).passed


def test_parity_fails_on_nan_and_on_wrong_shapes() -> None:
    eager = EagerBackend(SmallCNN(1, [4], 3, dropout=0.0))
    batches = _batches()
    reference = [eager(b) for b in batches]
    assert not compare(Shifted(eager, math.nan), batches, reference, tolerance=1.0).passed
    assert not compare(lambda x: eager(x)[:, :2], batches, reference, tolerance=1.0).passed


def test_sample_batches_take_the_requested_samples_plus_a_batch_of_one() -> None:
    data = torch.utils.data.TensorDataset(torch.randn(10, 1, 8, 8), torch.zeros(10, dtype=torch.long))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    batches = sample_batches(loader, 6)
    assert [len(b) for b in batches] == [4, 2, 1]
    assert torch.equal(batches[-1][0], data.tensors[0][0])


def test_sample_batches_refuse_a_dict_of_inputs_in_one_line() -> None:
    """A model whose forward takes a dict (tokens and a mask) cannot be traced by the writers: one line, not a
    TypeError from slicing a dict."""
    rows = [{"tokens": torch.zeros(5), "mask": torch.ones(5), "targets": torch.tensor(0)} for _ in range(4)]
    with pytest.raises(
        UserError, match=r"^export traces a model that takes one input tensor, .* a dict of tokens, mask"
    ):
        sample_batches(torch.utils.data.DataLoader(rows, batch_size=2), 4)


# --------------------------------------------------------------------------- writers
@pytest.mark.parametrize(
    ("writer", "backend", "name"),
    [(write_pt2, ExportedProgramBackend, "m.pt2"), (write_torchscript, TorchScriptBackend, "m.torchscript.pt")],
)
def test_writers_export_the_eval_mode_model_with_a_dynamic_batch(tmp_path, writer, backend, name) -> None:
    """A model handed over in train mode (dropout on, BatchNorm on batch statistics) still exports its eval-mode
    function: outputs per sample, independent of the batch, equal to eager eval at batch sizes 1 and 5."""
    torch.manual_seed(0)
    model = SmallCNN(1, [4, 8], 3, dropout=0.5)
    with torch.no_grad():  # non-trivial running statistics, so train-mode BN would differ from eval-mode BN
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2)
    model.train()
    written = writer(model, torch.randn(EXAMPLE_BATCH, 1, 8, 8), tmp_path / name, None)
    runner = backend(written.files[0])
    reference = EagerBackend(model)
    for size in (1, 5):
        x = torch.randn(size, 1, 8, 8)
        assert torch.allclose(runner(x), reference(x), atol=1e-5), size


# --------------------------------------------------------------------------- staging: final names for verified files
def test_a_staged_artifact_gets_its_final_name_only_when_published(tmp_path) -> None:
    from lab.files import publish, remove_stale_temps, staged

    with staged(tmp_path, "model.onnx") as stage:
        assert stage == tmp_path / ".model.onnx.tmp" and not list(stage.iterdir())
        model, data = stage / "model.onnx", stage / "model.onnx.data"  # a model and the weights file it names
        model.write_bytes(b"graph")
        data.write_bytes(b"weights")
        assert not (tmp_path / "model.onnx").exists()  # written and being checked: no final name yet
        assert publish([model, data], tmp_path) == [tmp_path / "model.onnx", tmp_path / "model.onnx.data"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert (tmp_path / "model.onnx.data").read_bytes() == b"weights"

    with staged(tmp_path, "model.pt2") as stage:  # failed its check: never published
        (stage / "model.pt2").write_bytes(b"unverified")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]

    # a kill mid-check leaves the staging folder: the next export's clean-up removes it, the published files stay
    (tmp_path / ".model.pt2.tmp").mkdir()
    (tmp_path / ".model.pt2.tmp" / "model.pt2").write_bytes(b"half")
    assert remove_stale_temps(tmp_path) == [tmp_path / ".model.pt2.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]


def test_a_staging_folder_that_cannot_be_made_is_one_line_naming_the_file(tmp_path) -> None:
    from lab.files import staged

    (tmp_path / "run").write_text("a file where the run dir should be")
    with pytest.raises(UserError, match=r"^cannot write .*run/model\.onnx: "), staged(tmp_path / "run", "model.onnx"):
        pass


class _RunsCode:
    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_a_pt2_whose_pickled_part_names_code_is_refused_and_runs_nothing(tmp_path) -> None:
    """torch.export.load retries a part it cannot read weights-only with a full unpickle; the runner forbids that."""
    model = nn.Sequential(nn.Linear(4, 2))
    good = write_pt2(model, torch.randn(EXAMPLE_BATCH, 4), tmp_path / "model.pt2").files[0]
    assert ExportedProgramBackend(good)(torch.zeros(3, 4)).shape == (3, 2)
    marker = tmp_path / "marker"
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as out:
        parts = [info for info in src.infolist() if info.filename.endswith(".pt")]
        assert parts, "torch.export.save wrote no pickled part: update this test to the archive's layout"
        for info in src.infolist():
            data = pickle.dumps(_RunsCode(marker)) if info in parts else src.read(info)
            out.writestr(info, data)
    with pytest.raises(UserError, match=r"^torch\.export\.load cannot read .*evil\.pt2: .*could run code.*export"):
        ExportedProgramBackend(evil)
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


# --------------------------------------------------------------------------- declared input shapes
def test_exported_runners_refuse_a_batch_of_another_shape_in_one_line(tmp_path) -> None:
    from lab.exporting.writers import write_onnx
    from lab.inference.backends import OnnxBackend

    model = nn.Sequential(nn.Linear(10, 3))
    example = torch.randn(EXAMPLE_BATCH, 10)
    runners = [
        OnnxBackend(write_onnx(model, example, tmp_path / "model.onnx").files[0]),
        ExportedProgramBackend(write_pt2(model, example, tmp_path / "model.pt2").files[0]),
    ]
    for runner in runners:
        assert runner.input_shape == ["batch", 10]
        assert runner(torch.zeros(5, 10)).shape == (5, 3)
        for wrong in ((4, 11), (4, 10, 1)):
            message = rf"^model\.\w+ takes inputs of shape \(batch, 10\); got \({wrong[0]}, "
            with pytest.raises(UserError, match=message):
                runner(torch.zeros(wrong))


def test_an_onnxruntime_failure_is_one_line_naming_the_inputs(tmp_path) -> None:
    from lab.exporting.writers import write_onnx
    from lab.inference.backends import OnnxBackend

    runner = OnnxBackend(write_onnx(nn.Linear(4, 2), torch.randn(2, 4), tmp_path / "model.onnx").files[0])
    with pytest.raises(UserError) as failed:
        runner(torch.zeros(3, 4, dtype=torch.int64))  # int64 where the graph takes float: onnxruntime refuses
    assert "\n" not in str(failed.value)
    assert str(failed.value).startswith("onnxruntime cannot run model.onnx on inputs of shape (3, 4) (int64): ")


# --------------------------------------------------------------------------- inputs
def _png(path, value: int = 128, size: int = 8, mode: str = "L") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, (size, size), value if mode == "L" else (value,) * 3).save(path)


def test_discover_files_folders_and_globs(tmp_path) -> None:
    _png(tmp_path / "a.png")
    _png(tmp_path / "sub" / "b.JPG")
    _png(tmp_path / ".ipynb_checkpoints" / "a-copy.png")  # hidden folder: not an input
    (tmp_path / "notes.txt").write_text("x")
    assert discover(str(tmp_path)) == [tmp_path / "a.png", tmp_path / "sub" / "b.JPG"]
    assert discover(str(tmp_path / "a.png")) == [tmp_path / "a.png"]
    assert discover(f"{tmp_path}/**/*.JPG") == [tmp_path / "sub" / "b.JPG"]
    for spec, message in [
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "notes.txt", "is not an image"),
        (f"{tmp_path}/*.gif", "matches no"),
    ]:
        with pytest.raises(UserError, match=message):
            discover(str(spec))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no \.png/\.jpg/\.jpeg images in this folder"):
        discover(str(tmp_path / "empty"))
    # a model's own readers (ModelConfig.input_readers): their files are found in folders and globs too
    (tmp_path / "sub" / "c.seq").write_text("x")
    assert discover(str(tmp_path), [".seq"]) == [
        tmp_path / "a.png",
        tmp_path / "sub" / "b.JPG",
        tmp_path / "sub" / "c.seq",
    ]
    assert discover(f"{tmp_path}/**/*.seq", [".seq"]) == [tmp_path / "sub" / "c.seq"]
    with pytest.raises(UserError, match=r"no \.png/\.jpg/\.jpeg/\.seq files"):
        discover(str(tmp_path / "empty"), [".seq"])
    for spec, message in [  # and the messages name them
        (tmp_path / "missing.seq", r"does not exist; give an image \(\.png/\.jpg/\.jpeg\) or a \.seq file, a folder"),
        (tmp_path / "notes.txt", r"is not an image \(\.png/\.jpg/\.jpeg\) or a \.seq file, .* like 'inputs/\*\.seq'"),
    ]:
        with pytest.raises(UserError, match=message):
            discover(str(spec), [".seq"])


def test_a_file_a_models_own_reader_cannot_read_is_skipped_and_the_rest_predicted(tmp_path) -> None:
    def read_seq(path, meta, resize):
        if path.read_text() == "truncated":
            raise UnreadableInput(f"{path}: cannot read it as a .seq file (EOFError)")
        yield str(path), torch.ones(3), None

    (tmp_path / "bad.seq").write_text("truncated")
    (tmp_path / "good.seq").write_text("1 1 1")
    samples = Inputs.read(str(tmp_path), {}, readers={".seq": read_seq})
    assert [name for name, _ in samples] == [str(tmp_path / "good.seq")]
    assert samples.skipped == [
        {
            "path": str(tmp_path / "bad.seq"),
            "error": f"{tmp_path / 'bad.seq'}: cannot read it as a .seq file (EOFError)",
        }
    ]


def test_images_use_the_eval_transform_and_corrupt_ones_are_skipped(tmp_path) -> None:
    _png(tmp_path / "gray.png", 51)
    _png(tmp_path / "big_rgb.png", 204, size=32, mode="RGB")  # converted to L and resized, as in evaluation
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\ngarbage")
    files = [tmp_path / "broken.png", tmp_path / "gray.png", tmp_path / "big_rgb.png"]
    samples = Inputs(files, META)
    items = dict(samples)
    assert list(items) == [str(tmp_path / "gray.png"), str(tmp_path / "big_rgb.png")]
    assert [s["path"] for s in samples.skipped] == [str(tmp_path / "broken.png")]
    with Image.open(tmp_path / "big_rgb.png") as image:
        assert torch.equal(items[str(tmp_path / "big_rgb.png")], eval_transform(META)(image))
    assert torch.allclose(items[str(tmp_path / "gray.png")], torch.full((1, 8, 8), (0.2 - 0.5) / 0.25))


def test_tensor_files_uint8_pixels_match_the_image_path_and_floats_pass_through(tmp_path) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (2, 1, 8, 8), dtype=np.uint8)
    Image.fromarray(pixels[1, 0]).save(tmp_path / "one.png")
    np.save(tmp_path / "pixels.npy", pixels)
    from_npy = dict(Inputs([tmp_path / "pixels.npy"], META))
    from_png = dict(Inputs([tmp_path / "one.png"], META))
    assert list(from_npy) == [f"{tmp_path / 'pixels.npy'}[0]", f"{tmp_path / 'pixels.npy'}[1]"]
    assert torch.equal(from_npy[f"{tmp_path / 'pixels.npy'}[1]"], from_png[str(tmp_path / "one.png")])

    normalized = torch.randn(3, 1, 8, 8)
    torch.save(normalized, tmp_path / "inputs.pt")
    assert torch.equal(torch.stack([t for _, t in Inputs([tmp_path / "inputs.pt"], META)]), normalized)

    torch.save(torch.randn(3, 3, 8, 8), tmp_path / "rgb.pt")
    with pytest.raises(UserError, match=r"expected \(N, 1, H, W\)"):
        list(Inputs([tmp_path / "rgb.pt"], META))
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(UserError, match="cannot read the tensor file"):
        list(Inputs([tmp_path / "bad.npy"], META))


# --------------------------------------------------------------------------- predict
def test_predict_batches_do_not_change_results_and_top_k_is_capped() -> None:
    model = SmallCNN(1, [4], 3, dropout=0.0)
    samples = [(f"x{i}", torch.randn(1, 8, 8)) for i in range(7)]
    labels = ["a", "b", "c"]
    one_batch = top_k_records(EagerBackend(model), samples, batch_size=64, top_k=5, labels=labels)
    small_batches = top_k_records(EagerBackend(model), samples, batch_size=3, top_k=5, labels=labels)
    assert [p["path"] for p in small_batches] == [f"x{i}" for i in range(7)]
    for a, b in zip(one_batch, small_batches):
        probs = [entry["prob"] for entry in a["top_k"]]
        assert [e["index"] for e in a["top_k"]] == [e["index"] for e in b["top_k"]]
        assert probs == pytest.approx([e["prob"] for e in b["top_k"]], abs=1e-6)
        assert len(probs) == 3 and sum(probs) == pytest.approx(1.0) and probs == sorted(probs)[::-1]
        assert a["label"] == a["top_k"][0]["label"]


def test_inputs_with_nan_or_inf_are_reported_not_predicted() -> None:
    from lab.tasks.outputs import batched_outputs

    rows = [
        ("row 0", torch.ones(3)),
        ("row 1", torch.tensor([1.0, math.nan, 0.0])),
        ("row 2", torch.full((3,), math.inf)),
    ]
    skipped: list[dict[str, str]] = []
    outputs = list(batched_outputs(lambda x: x.sum(dim=1, keepdim=True), rows, batch_size=8, skipped=skipped))
    assert [names for names, _ in outputs] == [["row 0"]]
    assert skipped == [{"path": f"row {i}", "reason": "NaN or inf in the input"} for i in (1, 2)]
