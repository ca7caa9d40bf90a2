"""model.freeze: matching parameters stay bit-identical through training and out of the optimizer; a pattern that
matches nothing is one clear error naming the model's top-level modules."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import in_process_trainer
from lab.errors import ConfigError
from lab.models.common import build as build_model
from lab.tasks.classification import Classification

META = {"input_shape": [4], "num_outputs": 3}  # an MLP: Sequential(Flatten, Linear 1, ReLU, Dropout, Linear 4)


def _mlp(compose, *freeze: str):
    cfg = compose(["model=mlp", "model.hidden_dims=[8]", f"model.freeze=[{','.join(freeze)}]", "optimizer=sgd"])
    torch.manual_seed(0)
    return cfg, build_model(cfg.model, META)


def test_frozen_parameters_stay_bit_identical_and_out_of_the_optimizer(compose, tmp_path: Path) -> None:
    cfg, model = _mlp(compose, "1.*")
    assert [name for name, p in model.named_parameters() if not p.requires_grad] == ["1.weight", "1.bias"]
    before = copy.deepcopy(model.state_dict())
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    trainer = in_process_trainer(cfg, model, Classification(3), DataLoader(data, batch_size=8), tmp_path)
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(model[4].weight), id(model[4].bias)}
    trainer.train_epoch(0)
    for name in ("1.weight", "1.bias"):
        assert torch.equal(model.state_dict()[name], before[name])
    assert not torch.equal(model.state_dict()["4.weight"], before["4.weight"])  # the rest trained
    # the checkpointed optimizer state holds the trained parameters only, and resumes
    state = trainer.state.payload()
    assert set(state["optimizer"]["state"]) == {"4.weight", "4.bias"}
    trainer.resume(state)
    trainer.tracker.finish()


def test_a_pattern_that_matches_nothing_names_the_top_level_modules(compose) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^model.freeze pattern 'backbone.\*' matches no parameter of the model; "
        r"its top-level modules are 1, 4 \(.*model.freeze=\[1.\*\]",
    ):
        _mlp(compose, "backbone.*")


def test_freezing_everything_is_refused(compose) -> None:
    with pytest.raises(ConfigError, match=r"freezes every parameter, so nothing would train"):
        _mlp(compose, "*")
