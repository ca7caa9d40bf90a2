"""A dense (per-pixel) task on the Task protocol: the normaliser behind weight(), the mean loss written once,
infer's predict with a run dir and original sizes, and the readers infer picks by suffix."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from lab.data.transforms import keeps_size
from lab.errors import UserError
from lab.exporting import manifest
from lab.inference.backends import EagerBackend
from lab.inference.inputs import Inputs
from lab.inference.predict import write_predictions
from lab.tasks.base import BaseTask, InferContext, MeanLoss, count, normalised_weight
from lab.training.start import check_first_batch

CPU = torch.device("cpu")
IMAGE_META = {
    "input_shape": [1, 8, 8],
    "num_outputs": 3,
    "in_channels": 1,
    "image_size": 8,
    "mean": [0.5],
    "std": [0.25],
}


class PixelTask(BaseTask):
    """Per-pixel cross-entropy over (N, K, H, W) logits and (N, H, W) labels: the one word `normaliser`."""

    normaliser = "elements"
    dynamic_dims = (0, 2, 3)

    def loss(self, logits, targets):
        return F.cross_entropy(logits.float(), targets, reduction="sum")


def test_the_first_batch_report_names_the_targets_once() -> None:
    """A task with no checks of its own (BaseTask's default) adds nothing to the shapes the report gives."""
    line = check_first_batch(torch.zeros(2, 1, 5, 7), torch.zeros(2, 5, 7, dtype=torch.long), PixelTask())
    assert line.count("(2, 5, 7)") == 1, line
    assert line.endswith("targets (2, 5, 7) torch.int64"), line


def test_the_weight_of_a_per_pixel_task_is_its_pixel_count_on_the_targets_own_device() -> None:
    targets = torch.zeros(2, 5, 7, dtype=torch.long)  # CPU targets, as the trainer passes them before the copy
    weight = PixelTask().weight(targets)
    assert weight.item() == 70 and weight.device == CPU and weight.dtype == torch.float32
    assert weight is PixelTask().weight(targets.clone())  # the cached count: no allocation per step
    assert BaseTask().weight(targets).item() == 2  # the default normaliser counts samples
    assert normalised_weight("samples", {"mask": targets, "edge": targets[:, 0]}).item() == 2  # dict targets


def test_tokens_count_every_target_but_the_ignored_ones_and_a_wrong_normaliser_is_named() -> None:
    class Unlabelled(PixelTask):
        normaliser, ignore_index = "tokens", 255

    targets = torch.tensor([[[0, 255], [1, 2]], [[255, 255], [3, 0]]])
    assert Unlabelled().weight(targets).item() == 5
    with pytest.raises(ValueError, match=r"samples, elements, tokens.*'pixels'"):
        normalised_weight("pixels", targets)


def test_the_default_metrics_average_the_tasks_own_loss_over_its_weight() -> None:
    task, torch_gen = PixelTask(), torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(n, 3, 4, 5, generator=torch_gen), torch.randint(0, 3, (n, 4, 5), generator=torch_gen))
        for n in (2, 1)
    ]
    metrics = task.metrics(CPU)
    assert isinstance(metrics, MeanLoss)
    for logits, targets in batches:
        metrics.update(logits, targets)
    logits, targets = (torch.cat(parts) for parts in zip(*batches))
    expected = F.cross_entropy(logits, targets).item()  # torch's mean over all 60 pixels
    assert metrics.compute()["loss"] == pytest.approx(expected, rel=1e-6)
    assert count(60, CPU).item() == 60


# --------------------------------------------------------------------------- infer: readers, predict
def _fcn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 1)).eval()


def _context(tmp_path, spec, meta=IMAGE_META, resize=False, batch_size=4) -> InferContext:
    cfg = SimpleNamespace(input=str(spec), infer=SimpleNamespace(batch_size=batch_size))
    return InferContext(cfg, meta, tmp_path, Inputs.read, resize=resize)


def test_a_dense_task_keeps_each_image_at_its_own_size_and_writes_its_outputs_into_the_run_dir(tmp_path) -> None:
    Image.fromarray(np.full((12, 20), 128, dtype=np.uint8)).save(tmp_path / "wide.png")
    Image.fromarray(np.full((8, 8), 128, dtype=np.uint8)).save(tmp_path / "small.png")
    assert keeps_size(IMAGE_META, PixelTask.dynamic_dims) and not keeps_size(IMAGE_META, (0,))
    inputs = Inputs.read(str(tmp_path), IMAGE_META, resize=False)
    shapes = {name.rsplit("/", 1)[-1]: tuple(t.shape) for name, t in inputs}
    assert shapes == {"small.png": (1, 8, 8), "wide.png": (1, 12, 20)}  # not resized to the training 8x8
    # the export manifest tells a non-Python runtime the same: no resize here, the crop of a fixed-size model there
    assert manifest.preprocessing(IMAGE_META, PixelTask.dynamic_dims)["resize"].startswith("none: ")
    fixed = manifest.preprocessing({**IMAGE_META, "crop_pct": 0.875, "interpolation": "bicubic"}, (0,))["resize"]
    assert fixed == "shorter side to 9 px (bicubic), then the centre 8x8 crop (crop_pct 0.875)"
    assert manifest.preprocessing(IMAGE_META, (0,))["resize"] == "8x8, bilinear (only when the image has another size)"
    assert inputs.sizes[str(tmp_path / "wide.png")] == (12, 20)
    resized = dict(Inputs.read(str(tmp_path / "wide.png"), IMAGE_META, resize=True))
    assert next(iter(resized.values())).shape == (1, 8, 8)

    context = _context(tmp_path, tmp_path)
    predictions = PixelTask().predict(EagerBackend(_fcn()), context)
    wide = next(r for r in predictions.records if r["path"].endswith("wide.png"))
    assert wide["output_shape"] == [3, 12, 20]  # too big for a CSV row: a file in the run dir
    assert np.load(tmp_path / wide["output_file"]).shape == (3, 12, 20)


def test_small_outputs_become_predictions_csv_columns(tmp_path) -> None:
    np.save(tmp_path / "rows.npy", np.arange(6, dtype=np.int32).reshape(3, 2))  # ints: read as float32
    meta = {"input_shape": [2], "num_outputs": 2}
    model = nn.Linear(2, 2)
    predictions = BaseTask().predict(EagerBackend(model), _context(tmp_path, tmp_path / "rows.npy", meta))
    csv_path, _ = write_predictions(predictions.records, tmp_path, predictions.skipped, {})
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["path", "output_0", "output_1"]
    expected = model(torch.tensor([[4.0, 5.0]]))[0].tolist()
    assert [float(rows[2]["output_0"]), float(rows[2]["output_1"])] == pytest.approx(expected)


def test_npy_of_any_numeric_dtype_is_read_as_float32_and_uint8_images_as_pixels(tmp_path) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (2, 1, 8, 8), dtype=np.uint8)
    np.save(tmp_path / "pixels.npy", pixels)
    from_pixels = [t for _, t in Inputs([tmp_path / "pixels.npy"], IMAGE_META)]
    assert torch.allclose(from_pixels[1], (torch.from_numpy(pixels[1]).float() / 255 - 0.5) / 0.25)

    meta = {"input_shape": [1, 8, 8], "num_outputs": 1}  # a model that is not an image model: arrays as they are
    for dtype in (np.uint8, np.int64, np.float16):
        np.save(tmp_path / "x.npy", pixels.astype(dtype))
        rows = [t for _, t in Inputs([tmp_path / "x.npy"], meta)]
        assert rows[0].dtype == torch.float32 and torch.equal(rows[0], torch.from_numpy(pixels[0]).float())
    np.save(tmp_path / "x.npy", pixels[:, :, :4])
    with pytest.raises(UserError, match=r"the model takes \(N, 1, 8, 8\)"):
        list(Inputs([tmp_path / "x.npy"], meta))
    assert [t.shape for _, t in Inputs([tmp_path / "x.npy"], meta, resize=False)] == [(1, 4, 8)] * 2


def test_an_arrays_dynamic_axes_take_any_size_and_its_other_axes_the_trained_one(tmp_path) -> None:
    meta = {"input_shape": [12, 4], "num_outputs": 3}  # (T, F) sequences: the time axis first, the features last
    np.save(tmp_path / "short.npy", np.zeros((2, 7, 4), dtype=np.float32))
    np.save(tmp_path / "wide.npy", np.zeros((2, 7, 5), dtype=np.float32))
    assert [t.shape for _, t in Inputs([tmp_path / "short.npy"], meta, dynamic_dims=(0, 1))] == [(7, 4)] * 2
    with pytest.raises(UserError, match=r"has shape \(2, 7, 5\); the model takes \(N, any, 4\)"):
        list(Inputs([tmp_path / "wide.npy"], meta, dynamic_dims=(0, 1)))
    with pytest.raises(UserError, match=r"the model takes \(N, 12, 4\)"):  # the batch axis alone is dynamic
        list(Inputs([tmp_path / "short.npy"], meta))


def test_csv_rows_of_a_model_without_feature_names_are_its_flat_inputs(tmp_path) -> None:
    (tmp_path / "rows.csv").write_text("a,b,c\n1,2,3\n4,5.5,6\n")
    rows = dict(Inputs.read(str(tmp_path / "rows.csv"), {"input_shape": [3], "num_outputs": 1}))
    assert [t.tolist() for t in rows.values()] == [[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]]
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    with pytest.raises(UserError, match="not a number"):
        list(Inputs.read(str(tmp_path / "bad.csv"), {"input_shape": [2], "num_outputs": 1}))
