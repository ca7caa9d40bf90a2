"""dist=fsdp's meta-device init (lab.distributed.meta_init) in one process: the replay draws exactly the weights of
the whole build, unsharded and sharded over a one-rank process group; what it cannot replay is named, and refused
under dist.meta_init=true. The two-rank run is tests/integration/test_meta_init_fsdp.py."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn

from helpers import META_INIT_CASES
from lab.config import options
from lab.distributed import meta_init
from lab.distributed.parallel import FSDP
from lab.errors import ConfigError, UserError
from lab.models.common import build as build_model

SEED = 1234
CPU = torch.device("cpu")


def _fsdp(meta_init_mode: object = True) -> SimpleNamespace:
    return SimpleNamespace(strategy="fsdp", meta_init=meta_init_mode, reshard_after_forward=True)


def _whole(model_cfg: dict, data_meta: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The ordinary build's state and the generator's state after it."""
    torch.manual_seed(SEED)
    model = build_model(model_cfg, data_meta)
    return model.state_dict(), torch.random.get_rng_state()


def _assert_bitwise(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name].cpu(), tensor), name


def test_every_replayable_model_option_has_a_case() -> None:
    """A model option that opts in (replayable_init) is covered by the bitwise tests below, through its case."""
    replayable = {name for name, cls in options.options("model").items() if getattr(cls, "replayable_init", False)}
    assert replayable == {cfg["name"] for cfg, _ in META_INIT_CASES.values()}


@pytest.mark.parametrize("case", sorted(META_INIT_CASES))
def test_the_replay_draws_the_whole_builds_weights_bitwise(case: str) -> None:
    model_cfg, data_meta = META_INIT_CASES[case]
    expected, rng_after = _whole(model_cfg, data_meta)
    torch.manual_seed(SEED)
    start = torch.random.get_rng_state()
    model = meta_init.build(model_cfg, data_meta, _fsdp())
    assert model is not None and all(t.is_meta for t in model.state_dict().values())
    assert torch.equal(torch.random.get_rng_state(), start)  # built on meta: nothing drawn
    meta_init.materialise(model, CPU, start, model_cfg)
    _assert_bitwise(expected, model.state_dict())
    assert torch.equal(torch.random.get_rng_state(), rng_after)  # the run's random stream goes on as after the build
    # model.freeze was applied on the meta device and survives
    assert [n for n, p in model.named_parameters() if not p.requires_grad] == [
        n for n, p in build_model(model_cfg, data_meta).named_parameters() if not p.requires_grad
    ]


@pytest.fixture
def one_rank_group():
    """A gloo process group of one rank, in this process (no process started)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield FSDP()
    dist.destroy_process_group()


@pytest.mark.parametrize("case", sorted(META_INIT_CASES))
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])  # bf16: BatchNorm gets its own fp32 unit first
def test_the_sharded_replay_draws_the_whole_builds_weights_bitwise(one_rank_group, case: str, dtype) -> None:
    from torch.distributed.tensor import DTensor

    model_cfg, data_meta = META_INIT_CASES[case]
    expected, rng_after = _whole(model_cfg, data_meta)
    torch.manual_seed(SEED)
    start = torch.random.get_rng_state()
    model = meta_init.build(model_cfg, data_meta, _fsdp())
    precision = SimpleNamespace(autocast_dtype=dtype)
    sharded, _ = one_rank_group.wrap(model, CPU, precision, model_cfg)
    meta_init.materialise(sharded, CPU, start, model_cfg)
    assert all(isinstance(p, DTensor) for p in sharded.parameters())
    _assert_bitwise(expected, one_rank_group.model_state(sharded))
    assert torch.equal(torch.random.get_rng_state(), rng_after)


def test_sync_bn_converts_the_meta_model_and_the_replay_stays_exact() -> None:
    """dist.sync_bn (CUDA runs: Parallel.wrap converts before sharding): SyncBatchNorm takes over the meta tensors."""
    model_cfg, data_meta = META_INIT_CASES["cnn"]
    torch.manual_seed(SEED)
    expected = nn.SyncBatchNorm.convert_sync_batchnorm(build_model(model_cfg, data_meta)).state_dict()
    torch.manual_seed(SEED)
    start = torch.random.get_rng_state()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(meta_init.build(model_cfg, data_meta, _fsdp()))
    assert any(isinstance(m, nn.SyncBatchNorm) for m in model.modules()) and meta_init.blocker(model) is None
    meta_init.materialise(model, CPU, start, model_cfg)
    _assert_bitwise(expected, model.state_dict())


# --------------------------------------------------------------------------- what the replay cannot redo
class _RandnParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(4))  # drawn in __init__, with no reset_parameters to draw it again


class _OwnAndChildren(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.bias = nn.Parameter(torch.zeros(2))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias)


class _ResetsChildren(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.inner.weight)


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (lambda: nn.Sequential(nn.Linear(2, 2), _RandnParameter()), r"1 \(_RandnParameter\) holds .* no reset_param"),
        (_OwnAndChildren, r"the model \(_OwnAndChildren\) holds tensors of its own beside submodules"),
        (_ResetsChildren, r"the model \(_ResetsChildren\) has a reset_parameters\(\) that would redraw its submodules"),
        (_Tied, r"a parameter is shared by two modules \(tied weights\)"),
    ],
)
def test_a_module_tree_the_replay_cannot_redo_is_named(model, why: str) -> None:
    with torch.device("meta"):
        built = model()
    assert meta_init.blocker(built) is not None
    assert re.search(why, str(meta_init.blocker(built)))


def test_a_tree_that_passes_is_not_enough_so_options_opt_in() -> None:
    """torchvision's ResNet passes every check of its tree, yet its constructor redraws the convolutions in a loop
    of its own (kaiming_normal_) after their reset_parameters(): the replay would give other weights, which is why
    a model option declares replayable_init rather than the tree deciding."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(SEED)
    whole = torchvision.models.resnet18(num_classes=3)
    with torch.device("meta"):
        model = torchvision.models.resnet18(num_classes=3)
    assert meta_init.blocker(model) is None
    torch.manual_seed(SEED)
    meta_init.materialise(model, CPU, torch.random.get_rng_state(), {"name": "mlp"})  # no init_module
    assert torch.equal(model.fc.weight, whole.fc.weight)  # drawn by reset_parameters() alone: replayed
    assert not torch.equal(model.conv1.weight, whole.conv1.weight)  # redrawn by the constructor's loop: not


def _option_build(monkeypatch, model_factory) -> None:
    """model=mlp's build made to return `model_factory()` (its option replayable: only the tree can block)."""
    monkeypatch.setattr(
        type(options.instantiate("model", {"name": "mlp"})), "build", lambda self, meta: model_factory()
    )


def test_meta_init_true_refuses_a_tree_it_cannot_replay_in_one_line(monkeypatch) -> None:
    _option_build(monkeypatch, _Tied)
    with pytest.raises(UserError) as refused:
        meta_init.build({"name": "mlp"}, {}, _fsdp(True))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("dist.meta_init=true cannot build this model on the meta device: a parameter is shared")
    assert message.endswith(
        "set dist.meta_init=auto (or false) to build the whole model on every rank before sharding it"
    )


def test_meta_init_auto_builds_such_a_model_whole_and_says_why(monkeypatch, caplog) -> None:
    _option_build(monkeypatch, _Tied)
    with caplog.at_level(logging.INFO, logger="lab.distributed.meta_init"):
        assert meta_init.build({"name": "mlp"}, {}, _fsdp("auto")) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert "the whole model is built on every rank before sharding (no meta-device init): a parameter is shared" in line


@pytest.mark.parametrize(
    ("dist_cfg", "model_cfg"),
    [
        (_fsdp(False), META_INIT_CASES["mlp"][0]),  # dist.meta_init=false: as before
        (_fsdp("auto"), {"name": "mlp", "init_from": "/nowhere/best.pt"}),  # the option knows: no meta build tried
    ],
)
def test_the_whole_build_stays_where_meta_init_does_not_apply(dist_cfg, model_cfg) -> None:
    assert meta_init.build(model_cfg, META_INIT_CASES["mlp"][1], dist_cfg) is None


@pytest.mark.parametrize("strategy", ["none", "ddp"])
def test_only_fsdp_builds_on_the_meta_device(strategy) -> None:
    dist_cfg = options.instantiate("dist", {"strategy": strategy})
    assert dist_cfg.model_on_meta(*META_INIT_CASES["mlp"]) is None  # only FSDP shards
    fsdp = options.instantiate("dist", {"strategy": "fsdp", "meta_init": "auto"})
    assert fsdp.model_on_meta(*META_INIT_CASES["mlp"]) is not None


def test_a_reset_parameters_that_leaves_a_tensor_unset_is_caught() -> None:
    class HalfReset(nn.Linear):
        def reset_parameters(self) -> None:
            nn.init.zeros_(self.weight)  # the bias left as it was

    with torch.device("meta"):
        model = nn.Sequential(HalfReset(2, 2))
    assert meta_init.blocker(model) is None  # the tree looks fine: the draw itself tells
    with pytest.raises(UserError, match=r"HalfReset.reset_parameters\(\) leaves bias unset"):
        meta_init.materialise(model, CPU, torch.random.get_rng_state(), {"name": "mlp"})  # no init_module


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=mlp", "model.init_from=best.pt"], "model.init_from loads weights while the model is built"),
    ],
)
def test_meta_init_true_refuses_what_the_model_option_knows_with_the_config(compose, overrides, message) -> None:
    from lab.config import validate

    cfg = compose(["dist=fsdp", "dist.meta_init=true", *overrides])
    with pytest.raises(ConfigError, match=r"^dist\.meta_init=true cannot build this model on the meta device: ") as e:
        validate(cfg)
    assert message in str(e.value)
    validate(compose(["dist=fsdp", "dist.meta_init=auto", *overrides]))  # auto: built whole, said in the run


def test_meta_init_takes_auto_true_or_false(compose) -> None:
    from lab.config import validate

    assert compose(["dist=fsdp"]).dist.meta_init == "auto"
    with pytest.raises(ConfigError, match=r"dist\.meta_init must be auto, true or false, got 'sometimes'"):
        validate(compose(["dist=fsdp", "dist.meta_init=sometimes"]))
