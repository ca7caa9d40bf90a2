"""dist=fsdp without the whole model on any rank: built on the meta device, sharded, then initialised shard by shard
to exactly the weights the ordinary build draws for the same seed.

Building on the meta device allocates nothing and draws no random numbers. :func:`materialise` then draws them
again, in the order the ordinary build (on the CPU) drew them, one module at a time:

1. construction: for each module in ``model.modules()`` order (a module's constructor runs its children's first,
   then its own ``reset_parameters()``; for a module that owns tensors and has no children owning any, this is the
   order its constructor ran in), its own parameters and buffers are made in full on the CPU and its
   ``reset_parameters()`` redraws them from the global generator;
2. the model's own post-construction init, when its option names one (``ModelConfig.init_module(model)``), which
   its ``__init__`` ends with as ``self.apply(<it>)``, replayed in ``apply``'s order (children before their parent).

Each module's full tensors exist only while its shard is cut from them (``distribute_tensor`` with
``src_data_rank=None``: every rank computed the same full tensor, so nothing is sent) and copied into the sharded
parameter: no rank ever holds more than one module's full tensors beyond its shards.

A model qualifies when its option says so (``ModelConfig.replayable_init``: its build draws nothing outside those
two steps, which a test proves bitwise; ``init_from`` and pretrained weights never qualify) and :func:`blocker`
finds nothing in its module tree the replay cannot redo. ``dist.meta_init`` chooses what happens otherwise
(:func:`build`).
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

from lab import models
from lab.config import options
from lab.config.distributed import meta_init_refused
from lab.errors import UserError

log = logging.getLogger(__name__)


def build(model_cfg: Any, data_meta: Mapping[str, Any], dist_cfg: Any) -> nn.Module | None:
    """Under dist=fsdp: the model built on the meta device when ``dist.meta_init`` allows it and its initialisation
    can be replayed; None when it is to be built whole as before (auto: with one line saying why; true: a UserError
    instead, though what the option itself knows was refused with the config). None for every other strategy.
    Called before the run writes anything, so a refusal leaves no trace."""
    mode = getattr(dist_cfg, "meta_init", False)  # a key of dist=fsdp's alone
    if mode is False:
        return None
    why = options.instantiate("model", model_cfg).meta_init_blocker()
    model = None
    if why is None:
        with torch.device("meta"):  # no memory, no random draws: those come in materialise
            model = models.build(model_cfg, data_meta)
        why = blocker(model)
    if why is None:
        return model
    if mode is True:
        raise UserError(meta_init_refused(why))
    log.info("dist=fsdp: the whole model is built on every rank before sharding (no meta-device init): %s", why)
    return None


def _own_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters and buffers a module holds itself (not its submodules')."""
    own: dict[str, torch.Tensor] = {name: p for name, p in module._parameters.items() if p is not None}
    own.update((name, b) for name, b in module._buffers.items() if b is not None)
    return own


def blocker(model: nn.Module) -> str | None:
    """Why the replay could not redraw `model`'s initial weights exactly (None: it can): every module that owns
    parameters or buffers must redraw them in its own ``reset_parameters()`` and have no submodule owning any (its
    constructor would have drawn the submodule's first, the replay draws its own first), no module without tensors
    may have a ``reset_parameters()`` (it would redraw its submodules' after their constructors did), and no
    parameter may be shared by two modules."""
    holds: dict[nn.Module, bool] = {}  # whether a module or one below it owns tensors (children first)
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
    """Give the meta-device `model` (sharded by fully_shard, or not) its storage on `device` and the initial weights
    the ordinary build draws from the global generator in `rng_state` (the state it would have started from), with
    the ``init_module`` of `model_cfg` (the ``model`` option that built it). Leaves the generator where that build
    leaves it."""
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
    # 2. the model's init_module over every module: the module's full tensors are drawn again from its construction
    # state (the first pass only advanced the generator past them), then init_module goes on from where the
    # previous module's left the generator
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
    """While inside (a FakeTensorMode): a copy of the meta-device `model` whose tensors are fake ones on `device`,
    shapes and dtypes without memory, for what must run on `device`'s kernels without weights (the FLOP count: on
    the meta device attention falls back to its math path, which counts otherwise). Real tensors given to it are
    made fake on the way in."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    stand_in = copy.deepcopy(model)  # outside the mode: it would make the meta tensors' copies fake too, and fail
    with FakeTensorMode(allow_non_fake_inputs=True):
        for module in stand_in.modules():
            _replace_own(module, lambda tensor: torch.empty(tensor.shape, dtype=tensor.dtype, device=device))
        yield stand_in


def _apply_order(module: nn.Module) -> Iterator[nn.Module]:
    """The modules in the order ``module.apply(fn)`` calls fn on them: children first, then their parent."""
    for child in module.children():
        yield from _apply_order(child)
    yield module


@contextlib.contextmanager
def _in_full(module: nn.Module) -> Iterator[None]:
    """While inside, the module's own parameters and buffers are full, unsharded CPU tensors (floating ones filled
    with NaN, so a reset_parameters() that leaves one undrawn is caught); its own (sharded) ones are put back on
    leaving."""
    saved_parameters, saved_buffers = dict(module._parameters), dict(module._buffers)
    _replace_own(module, _undrawn)
    try:
        yield
    finally:
        module._parameters.update(saved_parameters)
        module._buffers.update(saved_buffers)


def _undrawn(tensor: torch.Tensor) -> torch.Tensor:
    """A full CPU tensor of `tensor`'s shape and dtype, NaN where it can be."""
    full = torch.empty(tensor.shape, dtype=tensor.dtype)
    return full.fill_(math.nan) if full.is_floating_point() else full


def _replace_own(module: nn.Module, make: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Each tensor the module owns replaced by `make(tensor)`; a parameter by a parameter, as trainable as it was."""
    for name, tensor in _own_tensors(module).items():
        if name in module._parameters:
            module._parameters[name] = nn.Parameter(make(tensor), requires_grad=tensor.requires_grad)
        else:
            module._buffers[name] = make(tensor)


def _reset(module: nn.Module) -> None:
    """The module's reset_parameters(), as its constructor ended with; refused when it leaves a tensor undrawn."""
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
    """Each full tensor into the module's own tensor of that name: its local shard when sharded (a DTensor)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    with torch.no_grad():
        for name, target in _own_tensors(module).items():
            value = full[name]
            if isinstance(target, DTensor):
                shard = distribute_tensor(value, target.device_mesh, target.placements, src_data_rank=None)
                target.to_local().copy_(shard.to_local())
            else:
                target.copy_(value)
