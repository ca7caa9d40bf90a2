"""task.class_weights: the summed loss over the summed target weights is torch's weighted-mean cross-entropy, so
accumulated micro-batches still step like one large batch; a wrong list is one clear error; "balanced" comes from
the training labels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from helpers import in_process_trainer
from lab.config import options
from lab.errors import ConfigError, UserError
from lab.tasks.common import build as build_task

WEIGHTS = [0.5, 3.0, 1.25]


def _task(class_weights, label_smoothing: float = 0.0, num_classes: int = 3):
    cfg = OmegaConf.create(
        {"name": "classification", "class_weights": class_weights, "label_smoothing": label_smoothing}
    )
    return build_task(cfg, {"num_classes": num_classes})


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_loss_over_weight_is_torchs_weighted_mean_cross_entropy(label_smoothing: float) -> None:
    torch.manual_seed(0)
    logits, targets = torch.randn(10, 3), torch.tensor([0, 1, 1, 2, 2, 2, 0, 1, 2, 2])
    task = _task(WEIGHTS, label_smoothing)
    expected = F.cross_entropy(logits, targets, weight=torch.tensor(WEIGHTS), label_smoothing=label_smoothing)
    torch.testing.assert_close(task.loss(logits, targets) / task.weight(targets), expected)
    assert task.weight(targets).item() == pytest.approx(sum(WEIGHTS[t] for t in targets.tolist()))


def test_accumulated_micro_batches_with_class_weights_step_like_one_large_batch(compose, tmp_path: Path) -> None:
    """Micro-batches of different class mixes weigh differently: the group's total weight, not a mean of means."""
    cfg = compose(["optimizer=sgd", "optimizer.lr=0.5", "trainer.grad_clip=null", "logger=none"])
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0] * 8 + [1, 2] * 4 + [2] * 8 + [0, 1] * 4)  # each batch of 8 a different mix
    models = []
    for name, batch, accumulation in (("accumulated", 8, 2), ("large", 16, 1)):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        cfg.trainer.grad_accum_steps = accumulation
        loader = DataLoader(TensorDataset(x, y), batch_size=batch)
        trainer = in_process_trainer(cfg, model, _task(WEIGHTS), loader, tmp_path / name)
        trainer.train_epoch(0)
        trainer.tracker.finish()
        assert trainer.progress.global_step == 2
        models.append(model)
    for a, b in zip(*(model.parameters() for model in models)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_list_of_the_wrong_length_is_one_clear_error() -> None:
    with pytest.raises(UserError, match=r"^task.class_weights has 2 values but the dataset has 3 classes; give one"):
        _task([1.0, 2.0])


def test_bad_values_and_other_tasks_are_refused_by_the_schema() -> None:
    with pytest.raises(ConfigError, match=r"task.class_weights must be null, balanced or a list"):
        _task([1.0, -2.0, 1.0])
    with pytest.raises(ConfigError, match=r"class_weights"):  # regression has no such key
        options.instantiate("task", OmegaConf.create({"name": "regression", "class_weights": "balanced"}))


def test_balanced_weights_come_from_the_training_labels() -> None:
    labels = torch.tensor([0] * 6 + [1] * 3 + [2] * 1 + [0] * 4)  # the subset below keeps 6, 3 and 1 of them
    train_set = Subset(TensorDataset(torch.zeros(14, 2), labels), range(10))  # read sample by sample
    task = _task("balanced")
    task.prepare(train_set)
    # n / (K * count): 10 / (3 * 6), 10 / (3 * 3), 10 / (3 * 1)
    torch.testing.assert_close(task.class_weights, torch.tensor([10 / 18, 10 / 9, 10 / 3]))
    train_set.dataset.labels = labels  # a dataset that keeps its labels is read without loading samples
    task.prepare(train_set)
    torch.testing.assert_close(task.class_weights, torch.tensor([10 / 18, 10 / 9, 10 / 3]))
