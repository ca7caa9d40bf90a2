"""Model zoo: shapes, gradient flow, registry errors and the CNN's gradient checkpointing."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from lab import models
from lab.config import ConfigError, options
from lab.models.options import CNNConfig, MLPConfig
from model_checks import NUM_CLASSES, Cases, contract_tests, make_meta


# Small widths keep every test fast on 2 CPU cores; the configs go through OmegaConf as in a real run.
def mlp_cfg(**kw: Any) -> Any:
    return OmegaConf.structured(MLPConfig(hidden_dims=[32, 16], **kw))


def cnn_cfg(**kw: Any) -> Any:
    return OmegaConf.structured(CNNConfig(channels=[8, 16, 16], **kw))


CASES: Cases = {
    "mlp": (mlp_cfg, [(1, 8), (3, 28)]),
    "cnn": (cnn_cfg, [(1, 8), (3, 28)]),
}
test_output_is_logits_of_shape_batch_by_classes, test_gradients_reach_every_trainable_parameter, \
    test_eval_mode_is_deterministic = contract_tests(CASES)  # fmt: skip


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def test_mlp_is_batchnorm_free_so_samples_are_independent_of_their_batch() -> None:
    model = models.build(mlp_cfg(dropout=0.0), make_meta(1, 8)).train()
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    x = torch.randn(6, 1, 8, 8)
    torch.testing.assert_close(model(x)[:2], model(x[:2]))  # train mode too: no batch statistics anywhere


def test_mlp_is_sized_from_meta_before_any_forward() -> None:
    model = models.build(mlp_cfg(), make_meta(3, 4, num_classes=7))
    expected = (3 * 4 * 4 * 32 + 32) + (32 * 16 + 16) + (16 * 7 + 7)
    assert sum(p.numel() for p in model.parameters()) == expected  # would fail with uninitialized Lazy modules


def test_build_accepts_the_dataclass_as_well_as_dictconfig() -> None:
    model = models.build(CNNConfig(channels=[4]), make_meta(1, 8))
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, NUM_CLASSES)


def test_cnn_gradient_checkpointing_matches_the_plain_model(monkeypatch: pytest.MonkeyPatch) -> None:
    meta = make_meta(3, 16)
    plain = models.build(cnn_cfg(dropout=0.0), meta).train()
    ckpt = models.build(cnn_cfg(dropout=0.0, grad_checkpointing=True), meta).train()
    ckpt.load_state_dict(plain.state_dict())

    calls: list[int] = []
    real_checkpoint = models.cnn.checkpoint

    def counting_checkpoint(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_checkpoint(*args, **kwargs)

    monkeypatch.setattr(models.cnn, "checkpoint", counting_checkpoint)
    x = torch.randn(4, 3, 16, 16)
    out_plain, out_ckpt = plain(x), ckpt(x)
    out_plain.square().sum().backward()
    out_ckpt.square().sum().backward()

    assert len(calls) == len(ckpt.blocks)  # it really recomputed, once per block
    torch.testing.assert_close(out_ckpt, out_plain)
    grads = dict(plain.named_parameters())
    for name, p in ckpt.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, msg=name)
    # Recomputation must not update BatchNorm running statistics a second time.
    for (name, b_ckpt), b_plain in zip(ckpt.named_buffers(), plain.buffers()):
        torch.testing.assert_close(b_ckpt, b_plain, msg=name)

    calls.clear()
    ckpt.eval()
    with torch.no_grad():
        ckpt(x)
    ckpt.train()
    with torch.no_grad():
        ckpt(x)
    assert not calls  # nothing to save activations for: no checkpointing in eval or under no_grad


def test_unknown_model_name_lists_available_models() -> None:
    """The options listed are the registry's (a fork's own model among them, wherever it sorts), not spelt here."""
    listed = ", ".join(sorted(options.options("model")))
    assert {"cnn", "gpt", "mlp"} <= set(options.options("model"))
    with pytest.raises(
        ConfigError, match=f"model=transformer is not an option of model; choose one of {re.escape(listed)}"
    ) as err:
        models.build(OmegaConf.create({"name": "transformer"}), make_meta(1, 8))
    assert "\n" not in str(err.value)


def test_fsdp_units_are_the_top_level_blocks_and_gpts_blocks_alone() -> None:
    """What dist=fsdp shards on its own (ModelConfig.fsdp_units): each top-level child with parameters, a
    ModuleList's items each; GPT's option keeps its embeddings and final norm in the root unit (its output
    projection reads the token embedding's weight outside that embedding's forward)."""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)]))
    assert options.instantiate("model", {"name": "mlp"}).fsdp_units(model) == [model[0], model[2][0], model[2][1]]
    gpt_cfg = {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 8}
    gpt = models.build(gpt_cfg, {"vocab_size": 11, "block_size": 4, "input_shape": [4], "num_outputs": 11})
    option = options.instantiate("model", gpt_cfg)
    assert option.fsdp_units(gpt) == list(gpt.get_submodule("blocks").children())
    assert (
        option.init_module(gpt) == gpt.init_module
        and options.instantiate("model", {"name": "cnn"}).init_module(gpt) is None
    )
