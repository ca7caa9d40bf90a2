"""Run dist=fsdp without the whole model on any rank: build on the meta device, shard, then init shard by shard.

The meta build allocates nothing and draws no random numbers, so `materialise` replays the ordinary (CPU) build's
draws one module at a time: 1. construction, each module's `reset_parameters()` in `model.modules()` order; 2. the
option's `init_module`, in `apply`'s order. The weights come out bitwise the same for the same seed, and no rank
holds more than one module's full tensors beyond its shards. Which models qualify (`ModelConfig.replayable_init`,
`blocker`; never `init_from` or pretrained weights) and why: docs/architecture.md, "Meta-device init under FSDP".
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from lab.config import options
from lab.config.distributed import meta_init_refused
from lab.errors import UserError
from lab.models.common import build as build_model

log = logging.getLogger(__name__)


def build(model_cfg: Any, data_meta: Mapping[str, Any], dist_cfg: Any) -> nn.Module | None:
    """Return the model built on the meta device if `dist.meta_init` allows it and its init can be replayed
    (FSDPConfig.model_on_meta). Else None, to build it whole, after one line saying why (auto), or a `UserError`
    (true; what the option itself knows was refused with the config). It runs before the run writes anything, so a
    refusal leaves no trace."""
    mode = dist_cfg.meta_init
    if mode is False:
        return None
    option = options.instantiate("model", model_cfg)
    why = option.meta_init_blocker()
    model = None
    if why is None:
        with torch.device("meta"):  # no memory and no random draws; those come in materialise
            model = build_model(model_cfg, data_meta)
        why = option.meta_model_blocker(model)
    if why is None:
        return model
    if mode is True:
        raise UserError(meta_init_refused(why))
    log.info("dist=fsdp: the whole model is built on every rank before sharding (no meta-device init): %s", why)
    return None


def _own_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Return the parameters and buffers a module holds itself, not its submodules'."""
    own: dict[str, torch.Tensor] = {name: p for name, p in module._parameters.items() if p is not None}
    own.update((name, b) for name, b in module._buffers.items() if b is not None)
    return own


def blocker(model: nn.Module) -> str | None:
    """Return why the replay could not redraw `model`'s initial weights exactly, or None if it can.

    A module that owns parameters or buffers must redraw them in its own `reset_parameters()`, and no submodule of
    it may own any: its constructor drew the submodule's first, but the replay draws its own first. A module without
    tensors may have no `reset_parameters()`, which would redraw its submodules' after their constructors did. And
    no parameter may be shared by two modules."""
    holds: dict[nn.Module, bool] = {}  # whether a module or one below it owns tensors, filled children first
    for module in _apply_order(model):
        holds[module] = bool(_own_tensors(module)) or any(holds[child] for child in module.children())
    for name, module in model.named_modules():
        what = f"{name or 'the model'} ({type(module).__name__})"
        below = any(holds[child] for child in module.children())
        if _own_tensors(module):
            if not callable(getattr(module, "reset_parameters", None)):
                return f"{what} holds parameters or buffers but has no reset_parameters() to draw them again"
            if below:  # its constructor drew its own tensors after its children's, which modules() visits later
                return f"{what} holds tensors of its own beside submodules with tensors: their draw order is unknown"
        elif below and callable(getattr(module, "reset_parameters", None)):
            return f"{what} has a reset_parameters() that would redraw its submodules' weights"
    named = list(model.named_parameters(remove_duplicate=False))
    if len({id(p) for _, p in named}) < len(named):
        return "a parameter is shared by two modules (tied weights): each module's init would draw it again"
    return None


def materialise(model: nn.Module, device: torch.device, rng_state: torch.Tensor, model_cfg: Any) -> None:
    """Give the meta-device `model` (sharded by fully_shard or not) storage on `device` and its initial weights.

    The weights are those the ordinary build draws from the global generator, starting at `rng_state`, with the
    `init_module` of `model_cfg` (the `model` option that built it). Leaves the generator where that build does."""
    model.to_empty(device=device)
    seam = options.instantiate("model", model_cfg).init_module(model)
    torch.random.set_rng_state(rng_state)
    starts: dict[nn.Module, torch.Tensor] = {}
    for module in model.modules():  # 1. construction
        starts[module] = torch.random.get_rng_state()
        with _in_full(module):
            _reset(module)
            full = _own_tensors(module)
        if seam is None:
            _copy_into_shards(module, full)
    if seam is None:
        return
    # 2. the model's init_module over every module. The module's full tensors are drawn again from its construction
    # state, since the first pass only moved the generator past them. Then init_module goes on from where the
    # previous module's left the generator.
    state = torch.random.get_rng_state()
    for module in _apply_order(model):
        with _in_full(module):
            torch.random.set_rng_state(starts[module])
            _reset(module)
            torch.random.set_rng_state(state)
            seam(module)
            state = torch.random.get_rng_state()
            full = _own_tensors(module)
        _copy_into_shards(module, full)


@contextlib.contextmanager
def on_fake_device(model: nn.Module, device: torch.device) -> Iterator[nn.Module]:
    """Yield a copy of the meta-device `model` with fake tensors on `device` (shapes and dtypes, no memory), inside a
    FakeTensorMode that makes real inputs fake too. Code that needs `device`'s kernels then runs without weights, as
    the FLOP count must: on the meta device attention falls back to its math path, which counts differently."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    stand_in = copy.deepcopy(model)  # outside the mode, which would make the meta tensors' copies fake and fail
    with FakeTensorMode(allow_non_fake_inputs=True):
        for module in stand_in.modules():
            _replace_own(module, lambda tensor: torch.empty(tensor.shape, dtype=tensor.dtype, device=device))
        yield stand_in


def _apply_order(module: nn.Module) -> Iterator[nn.Module]:
    """Yield the modules in the order `module.apply(fn)` calls fn on them: children first, then their parent."""
    for child in module.children():
        yield from _apply_order(child)
    yield module


@contextlib.contextmanager
def _in_full(module: nn.Module) -> Iterator[None]:
    """Swap the module's own parameters and buffers for full, unsharded CPU tensors while inside. Floating ones are
    NaN, so a reset_parameters() that leaves one undrawn is caught. The (sharded) originals come back on leaving."""
    saved_parameters, saved_buffers = dict(module._parameters), dict(module._buffers)
    _replace_own(module, _undrawn)
    try:
        yield
    finally:
        module._parameters.update(saved_parameters)
        module._buffers.update(saved_buffers)


def _undrawn(tensor: torch.Tensor) -> torch.Tensor:
    """Return a full CPU tensor of `tensor`'s shape and dtype, filled with NaN where the dtype allows."""
    full = torch.empty(tensor.shape, dtype=tensor.dtype)
    return full.fill_(math.nan) if full.is_floating_point() else full


def _replace_own(module: nn.Module, make: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Replace each tensor the module owns by `make(tensor)`; a parameter stays a parameter, as trainable as before."""
    for name, tensor in _own_tensors(module).items():
        if name in module._parameters:
            module._parameters[name] = nn.Parameter(make(tensor), requires_grad=tensor.requires_grad)
        else:
            module._buffers[name] = make(tensor)


def _reset(module: nn.Module) -> None:
    """Run the module's reset_parameters(), as its constructor did. Raise a `UserError` if it leaves a tensor unset."""
    if not _own_tensors(module):
        return
    module.reset_parameters()  # type: ignore[operator]  # blocker() made sure it has one
    undrawn = [
        name for name, tensor in _own_tensors(module).items() if tensor.is_floating_point() and tensor.isnan().any()
    ]
    if undrawn:
        raise UserError(
            f"{type(module).__name__}.reset_parameters() leaves {', '.join(undrawn)} unset, so dist=fsdp's meta-device "
            "init cannot give it its initial value: make reset_parameters() set every tensor the module owns, or set "
            "dist.meta_init=false"
        )


def _copy_into_shards(module: nn.Module, full: dict[str, torch.Tensor]) -> None:
    from torch.distributed.tensor import DTensor, distribute_tensor

    with torch.no_grad():
        for name, target in _own_tensors(module).items():
            value = full[name]
            if isinstance(target, DTensor):  # src_data_rank=None: every rank drew the same full tensor, none is sent
                shard = distribute_tensor(value, target.device_mesh, target.placements, src_data_rank=None)
                target.to_local().copy_(shard.to_local())
            else:
                target.copy_(value)
