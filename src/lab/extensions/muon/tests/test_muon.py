"""optimizer=muon: which parameters Muon takes and which AdamW (a GPT, the convnet, an MLP), both following the
schedule, one optimizer that resumes bit-exactly, and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import in_process_trainer
from lab.config import ConfigError, validate
from lab.extensions.muon.options import MuonConfig
from lab.models.common import build as build_model
from lab.optim.optimizers import build_optimizer
from lab.optim.schedulers import build_scheduler
from lab.tasks.classification import Classification

GPT = ["model=gpt", "model.n_layer=2", "model.n_head=2", "model.n_embd=16"]
MLP = ["model=mlp", "model.hidden_dims=[16,8]", "model.dropout=0"]
MLP_META = {"input_shape": [4], "num_outputs": 3}


def _split(compose, overrides: list[str], meta: dict) -> tuple[torch.optim.Optimizer, dict[str, str]]:
    cfg = compose(["optimizer=muon", *overrides])
    torch.manual_seed(0)
    model = build_model(cfg.model, meta)
    optimizer = build_optimizer(cfg.optimizer, model, cfg.model)
    names = {id(p): name for name, p in model.named_parameters()}
    kinds = {names[id(p)]: "muon" if g["muon"] else "adamw" for g in optimizer.param_groups for p in g["params"]}
    assert set(kinds) == set(names.values())  # every trainable parameter, once
    return optimizer, kinds


def test_gpt_hidden_matrices_go_to_muon_embeddings_norms_and_biases_to_adamw(compose) -> None:
    _, kinds = _split(compose, GPT, {"vocab_size": 11, "block_size": 8})
    muon = sorted(name for name, kind in kinds.items() if kind == "muon")
    assert muon == [
        "blocks.0.attn.proj.weight",
        "blocks.0.attn.qkv.weight",
        "blocks.0.mlp.0.weight",
        "blocks.0.mlp.2.weight",
        "blocks.1.attn.proj.weight",
        "blocks.1.attn.qkv.weight",
        "blocks.1.mlp.0.weight",
        # blocks.1.mlp.2 is what the GPT's option names as its head (the core's default: the last nn.Linear)
    ]
    assert kinds["tok_emb.weight"] == kinds["pos_emb.weight"] == kinds["blocks.1.mlp.2.weight"] == "adamw"
    assert kinds["ln_f.weight"] == kinds["blocks.0.attn.qkv.bias"] == "adamw"


def test_the_convnet_gives_muon_nothing_conv_kernels_and_head_go_to_adamw(compose) -> None:
    optimizer, kinds = _split(
        compose, ["model=cnn", "model.channels=[4,8]"], {"input_shape": [3, 8, 8], "num_outputs": 5}
    )
    assert set(kinds.values()) == {"adamw"}
    assert [type(part).__name__ for part in optimizer.parts] == ["AdamW"]


def test_groups_keep_weight_decay_and_lrs_and_the_schedule_scales_both(compose) -> None:
    overrides = [*MLP, "optimizer.weight_decay=0.1", "optimizer.head_lr_scale=10", "scheduler=wsd"]
    optimizer, _ = _split(compose, overrides, MLP_META)
    groups = [(g["muon"], g["weight_decay"], g["lr"], len(g["params"])) for g in optimizer.param_groups]
    # Muon first (train/lr is its lr); no decay on biases; the head (the last Linear) at 10x AdamW's lr
    assert groups == [
        (True, 0.1, 0.02, 2),
        (False, 0.1, 3e-3, 0),
        (False, 0.0, 3e-3, 2),
        (False, 0.1, 3e-3 * 10, 1),
        (False, 0.0, 3e-3 * 10, 1),
    ]
    build_scheduler(compose(["optimizer=muon", *overrides]).scheduler, optimizer, 100)  # warmup's first step: 1/20
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([1e-3, 1.5e-4, 1.5e-4, 1.5e-3, 1.5e-3])


def test_training_resumes_bit_exactly_from_a_checkpoint(compose, tmp_path: Path) -> None:
    overrides = [*MLP, "optimizer=muon", "optimizer.weight_decay=0.1", "scheduler=wsd", "scheduler.warmup_steps=2"]
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))

    def fit(epochs: int, run_dir: Path, resume_from: Path | None = None) -> torch.nn.Module:
        cfg = compose([*overrides, f"trainer.max_epochs={epochs}", "scheduler.decay_fraction=0.5"])
        torch.manual_seed(0)
        model = build_model(cfg.model, MLP_META)
        loader = DataLoader(data, batch_size=8)
        # 8 steps over 2 epochs: warmup 2, stable 2, decay 4, the resumed part crossing into the decay
        trainer = in_process_trainer(cfg, model, Classification(3), loader, run_dir, total_steps=8)
        if resume_from is not None:
            trainer.resume(torch.load(resume_from / "checkpoints" / "last.pt", weights_only=True))
        trainer.fit()
        trainer.tracker.finish()
        return model

    straight = fit(2, tmp_path / "straight")
    fit(1, tmp_path / "first")
    resumed = fit(2, tmp_path / "resumed", resume_from=tmp_path / "first")
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_the_split_is_logged_by_describe(compose) -> None:
    cfg = compose(["optimizer=muon", *MLP])
    torch.manual_seed(0)
    model = build_model(cfg.model, MLP_META)
    line = MuonConfig().describe(model, build_optimizer(cfg.optimizer, model, cfg.model))
    assert line == (
        "optimizer=muon: Muon on 2 tensors (192 values), AdamW on 4 tensors (51 values); AdamW's weights: 7.weight"
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"momentum": 1.0}, r"optimizer.momentum must be in \[0, 1\), got 1.0"),
        ({"ns_steps": 0}, r"optimizer.ns_steps must be in \[1, 99\], got 0"),
        ({"adamw_lr": 0.0}, r"optimizer.adamw_lr must be in \(0, 100\], got 0.0"),
        ({"adamw_betas": [0.9]}, r"optimizer.adamw_betas must be two numbers \[beta1, beta2\], got \[0.9\]"),
        ({"adamw_betas": [0.9, 1.0]}, r"optimizer.adamw_betas\[1\] must be in \[0, 1\), got 1.0"),
        ({"adamw_lr": 20.0, "weight_decay": 0.05}, r"shrinks every AdamW weight by 1 per step"),
    ],
)
def test_bad_keys_are_refused(keys, message) -> None:
    with pytest.raises(ConfigError, match=message):
        MuonConfig(**keys)


def test_fsdp_is_refused_before_the_run(compose) -> None:
    with pytest.raises(ConfigError, match=r"^optimizer=muon does not work with dist=fsdp: .* use dist=ddp"):
        validate(compose(["optimizer=muon", "dist=fsdp"]))
