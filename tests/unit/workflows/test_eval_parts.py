"""Pieces of scripts/eval.py: confusion matrix, per-class accuracy, checkpoint restore, schemas, the figure."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from lab import checkpointing
from lab.config import ConfigError, validate
from lab.config.trackers import trackers
from lab.data.common import make_meta
from lab.errors import UserError
from lab.models.common import build as build_model
from lab.tasks.classification import Classification, ClassificationMetrics
from lab.tasks.figures import confusion_matrix_png
from lab.workflows import restore

CPU = torch.device("cpu")


# --------------------------------------------------------------------------- metrics
def test_confusion_matrix_and_per_class_accuracy_by_hand() -> None:
    # predictions (argmax) 0, 1, 1, 2, 0 for targets 0, 1, 0, 2, 2; class 3 never appears
    logits = torch.tensor(
        [[5.0, 0, 0, 0], [0, 5.0, 0, 0], [0, 5.0, 0, 0], [0, 0, 5.0, 0], [5.0, 0, 0, 0]],
    )
    targets = torch.tensor([0, 1, 0, 2, 2])
    metrics = Classification(num_classes=4).metrics(CPU, full=True)
    metrics.update(logits[:2], targets[:2])  # two batches: counts accumulate
    metrics.update(logits[2:], targets[2:])
    assert metrics.confusion_matrix() == [[1, 1, 0, 0], [0, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    assert metrics.per_class_accuracy() == [0.5, 1.0, 0.5, None]
    assert metrics.compute()["acc"] == pytest.approx(3 / 5)  # = trace / total


def test_confusion_is_opt_in_and_leaves_the_scalars_unchanged() -> None:
    logits, targets = torch.randn(20, 5), torch.randint(0, 5, (20,))
    plain, full = ClassificationMetrics(5, CPU), ClassificationMetrics(5, CPU, confusion=True)
    plain.update(logits, targets)
    full.update(logits, targets)
    assert plain.compute() == full.compute()
    assert plain.confusion is None
    with pytest.raises(RuntimeError, match="confusion=True"):
        plain.confusion_matrix()


# --------------------------------------------------------------------------- restore
META = make_meta(10, 1, 8, [0.3], [0.4], [str(i) for i in range(10)])


@pytest.fixture
def checkpoint_file(tmp_path, compose):
    """A checkpoint as train.py writes it (CNN on digits), without training."""
    cfg = compose(["model=cnn"])
    model = build_model(cfg.model, META)
    path = tmp_path / "best.pt"
    checkpointing.save(
        path,
        {
            "model": model.state_dict(),
            "config": OmegaConf.to_container(cfg, resolve=True),
            "data_meta": META,
            "provenance": {"run_dir": "/runs/x", "wandb_id": "abc123", "git_commit": "f" * 40},
            "progress": {"epoch": 3, "global_step": 57},
        },
    )
    return path, model


def test_restore_gives_the_plain_eval_mode_model_with_its_weights(checkpoint_file) -> None:
    path, original = checkpoint_file
    restored = restore.rebuild(path)
    assert not restored.model.training
    x = torch.randn(3, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(restored.model(x), original.eval()(x))
    assert restored.global_step == 57
    assert restored.source() == {
        "ckpt_path": str(path),
        "run_dir": "/runs/x",
        "wandb_id": "abc123",
        "wandb_path": None,
        "git_commit": "f" * 40,
        "git_dirty": None,
        "epoch": 3,
        "global_step": 57,
    }


def test_data_overrides_apply_on_the_checkpoints_data_config(checkpoint_file) -> None:
    restored = restore.rebuild(checkpoint_file[0])
    cfg = restore.data_config(restored, {"batch_size": 7, "root": None, "num_workers": None})
    assert cfg.batch_size == 7 and cfg.name == "digits" and cfg.root == restored.config["data"]["root"]
    with pytest.raises(ConfigError, match=r"data\.batch_size must be >= 1"):
        restore.data_config(restored, {"batch_size": 0})


def test_data_whose_meta_differs_from_the_checkpoint_is_refused(checkpoint_file) -> None:
    restored = restore.rebuild(checkpoint_file[0])  # META's mean/std are not digits' own statistics
    with pytest.raises(UserError, match=r"mean=.*checkpoint was trained with mean=\[0.3\]"):
        restore.rebuild_data(restored)


def test_a_checkpoint_without_training_config_is_a_user_error(tmp_path) -> None:
    path = tmp_path / "weights_only.pt"
    checkpointing.save(path, {"model": {}})
    with pytest.raises(UserError, match="holds no training config"):
        restore.rebuild(path)


# --------------------------------------------------------------------------- schemas
@pytest.mark.parametrize(
    ("config_name", "overrides", "message"),
    [
        ("eval", [], "ckpt_path is required"),
        ("eval", ["ckpt_path=x.pt", "eval.split=train"], "eval.split='train' is not valid"),
        ("export", ["ckpt_path=x.pt", "export.formats=[onnx,tflite]"], "export.formats='tflite' is not valid"),
        ("export", ["ckpt_path=x.pt", "export.tolerance=0"], "export.tolerance must be > 0"),
        ("infer", ["ckpt_path=x.pt"], "input is required"),
        ("infer", ["ckpt_path=x.pt", "input=a.png", "infer.top_k=0"], "infer.top_k must be >= 1"),
    ],
)
def test_schema_rejects_bad_values(compose, config_name, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(compose(overrides, config_name=config_name))


@pytest.mark.parametrize("config_name", ["eval", "export", "infer"])
def test_defaults_compose_and_only_delivery_settings_of_data_are_overridable(compose, config_name) -> None:
    overrides = ["ckpt_path=x.pt", "input=a.png"] if config_name == "infer" else ["ckpt_path=x.pt"]
    cfg = compose(overrides, config_name=config_name)
    validate(cfg)
    assert cfg.task_name == config_name and cfg.logger.backends == {name: name == "wandb" for name in trackers()}
    if config_name != "infer":
        assert compose([*overrides, "data.root=/data", "data.batch_size=8"], config_name=config_name).data.root
        with pytest.raises(Exception, match="image_size"):  # what the model sees stays as trained
            compose([*overrides, "data.image_size=32"], config_name=config_name)


# --------------------------------------------------------------------------- figure
def test_confusion_matrix_png(tmp_path) -> None:
    names = ["T-shirt/top", "Trouser", "Pullover"]
    path = confusion_matrix_png([[5, 1, 0], [0, 6, 0], [2, 0, 4]], names, tmp_path / "cm.png", title="val")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 3 * 48 and image.height > 3 * 48
        # the (0, 0) cell is 5/6 of its row: a dark blue; the (0, 2) cell is empty: white
        pixels = image.convert("RGB")
        row0 = [pixels.getpixel((x, y)) for x, y in _cell_centers(image, 3)[0]]
    assert row0[0][2] == 255 and row0[0][0] < 100 and row0[2] == (255, 255, 255)


def _cell_centers(image: Image.Image, k: int) -> list[list[tuple[int, int]]]:
    """Cell corners found from the grid's bottom-right corner (grid cells are 48 px for small k, 16 px margin),
    probed a few pixels inside each cell so printed counts do not hit the probe."""
    cell, right, bottom = 48, image.width - 16, image.height - 16
    left, top = right - k * cell, bottom - k * cell
    return [[(left + j * cell + 4, top + i * cell + 4) for j in range(k)] for i in range(k)]
