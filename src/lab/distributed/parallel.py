"""How the ranks cooperate: the strategy object a `dist` option builds (`lab.config.distributed`).

`Parallel` is one process, where every method is a cheap no-op. `DDP` and `FSDP` override what differs: how the
model is wrapped, how gradient accumulation skips a reduction, what evaluation runs and how checkpoint state is
gathered or sharded. The trainer and workflows call the same methods either way, so there is one code path and no
check of a strategy's name outside its own class.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler, Sampler

from lab import checkpointing
from lab.config import options
from lab.data.common import OrderedDataset

log = logging.getLogger(__name__)

_NO_CONTEXT = contextlib.nullcontext()  # reused, since the step asks for one every micro-batch


def _state_dict_api() -> tuple[Any, Any]:
    """Return torch.distributed.checkpoint.state_dict and its options for full state dicts on the CPU. Imported
    only when a checkpoint is first written or read, as it brings DTensor along: a second before the first step."""
    from torch.distributed.checkpoint import state_dict

    return state_dict, state_dict.StateDictOptions(full_state_dict=True, cpu_offload=True)


class ShardSampler(Sampler[int]):
    """One rank's evaluation shard. All ranks get equally many indices, so collectives stay in step; shorter shards
    are padded with a repeat that `num_valid` tells the evaluation loop to ignore, so metrics stay exact."""

    def __init__(self, size: int, rank: int = 0, world_size: int = 1) -> None:
        self.indices = list(range(rank, size, world_size))
        self.num_valid = len(self.indices)
        per_rank = math.ceil(size / world_size)
        self.indices += self.indices[-1:] * (per_rank - self.num_valid) if self.indices else [0] * per_rank

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def _sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """For dist.sync_bn, compute batch statistics over all ranks (DDP and FSDP alike). SyncBatchNorm needs CUDA."""
    if device.type != "cuda":
        log.warning("dist.sync_bn=true has no effect on %s: SyncBatchNorm needs CUDA", device.type)
        return model
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


@dataclass
class Parallel:
    """One process (dist=none), and what all strategies share: samplers, reductions, votes, checkpoint state."""

    name: ClassVar[str] = "none"  # the dist option that builds it, logged at the start
    shards_weights: ClassVar[bool] = False  # matches the option in lab.config.distributed
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    timeout_s: float = 600.0  # dist.timeout_s, how long a collective waits for a missing rank
    sync_bn: bool = False  # dist.sync_bn
    _control: Any = field(default=None, repr=False)  # a gloo group for host-side votes (largest_at_last_call)
    _vote: Any = field(default=None, repr=False)  # the vote in flight, as (work, its tensor)
    _checkpoint_group: Any = field(default=None, repr=False)  # a gloo group for sharded checkpoints

    @property
    def active(self) -> bool:
        """Whether the ranks are in a process group; never for one process."""
        return False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ data
    def train_sampler(self, dataset: Any, seed: int) -> Sampler[int]:
        """Return the same shuffle for every strategy: a permutation of (seed + epoch), of which rank r takes every
        r-th index. So dist=none with batch 64 sees exactly the samples 2 DDP ranks with batch 32 see together. A
        dataset with its own order (e.g. shard by shard, for locality) is an `OrderedDataset` and supplies it."""
        if isinstance(dataset, OrderedDataset):
            return dataset.train_sampler(self.rank, self.world_size, seed)
        return DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank, shuffle=True, seed=seed)

    def eval_sampler(self, dataset: Any) -> ShardSampler:
        return ShardSampler(len(dataset), self.rank, self.world_size)

    # ------------------------------------------------------------------ model
    def wrap(self, model: nn.Module, device: torch.device, precision: Any, model_cfg: Any) -> tuple[nn.Module, Any]:
        """Return (module, forward): the module checkpoints see, and the callable the training step runs.
        `model_cfg` is the `model` option that built it; FSDP shards its `fsdp_units(model)`."""
        if not self.active:
            return model, model
        if self.sync_bn:
            model = _sync_batchnorm(model, device)
        return self._wrapped(model, device, precision, model_cfg)

    def _wrapped(self, model: nn.Module, device: torch.device, precision: Any, model_cfg: Any) -> tuple[nn.Module, Any]:
        return model, model

    def rewrap(self, model: nn.Module, wrapped: Any) -> Any:
        """Return the training forward, made anew if parameters started to need gradients since `wrap` (DDP's
        reducer would skip them), else the same one."""
        return wrapped

    def accumulation(self, forward: Any, sync: bool) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce on non-final micro-steps, so it runs once per optimizer step, not per batch."""
        return _NO_CONTEXT

    # ------------------------------------------------------------------ communication
    def all_reduce_sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.active:
            dist.all_reduce(tensor)
        return tensor

    def evaluation_forward(self, model: nn.Module, forward: Any) -> Any:
        """Return what evaluation runs: the training forward, since FSDP's sharded model must gather its weights."""
        return forward

    def mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        """Return the mean of a device scalar over ranks, as a copy (the value itself for one process)."""
        if not self.active:
            return value
        total = value.detach().clone()
        dist.all_reduce(total)
        return total / self.world_size

    def reduce_metrics(self, metrics: Any) -> None:
        """Sum a task accumulator's tensor attributes, its running sums, across ranks."""
        if self.active:
            for value in vars(metrics).values():
                if isinstance(value, torch.Tensor):
                    dist.all_reduce(value)

    def sync_buffers(self, model: nn.Module) -> None:
        """Give every rank rank 0's buffers (BatchNorm running statistics). Each rank updates its own from its own
        batches, and DDP re-broadcasts only at the next training forward (FSDP2 never). Without this, ranks would
        validate with different statistics, and checkpoints would hold statistics the metrics never saw."""
        if self.active:
            for buffer in model.buffers():
                dist.broadcast(buffer, src=0)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def largest_at_last_call(self, value: int) -> int:
        """Return the largest `value` of all ranks at the previous call (`value` itself for one process). The vote
        runs on a gloo group in the background, so the step never waits on it or syncs the GPU. Every rank gets the
        same answer one call later, so all take the same branch (e.g. stop and save) at the same step."""
        if not self.active:
            return value
        if self._control is None:
            # a collective, as every rank makes its first call together. Give it the job's timeout, or a new group
            # would wait 30 minutes for a rank that stopped.
            timeout = datetime.timedelta(seconds=self.timeout_s)
            self._control = dist.new_group(backend="gloo", timeout=timeout)
        answer = 0
        if self._vote is not None:
            work, votes = self._vote
            work.wait()
            answer = int(votes.item())
        votes = torch.tensor([value], dtype=torch.int64)
        self._vote = (dist.all_reduce(votes, op=dist.ReduceOp.MAX, group=self._control, async_op=True), votes)
        return answer

    def broadcast(self, obj: Any) -> Any:
        """Return rank 0's value on every rank."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    # ------------------------------------------------------------------ checkpoint state (collective for FSDP)
    @property
    def shards_checkpoints(self) -> bool:
        """Whether each rank writes its own shards (`lab.checkpointing.sharded`), as FSDP does, with no gather."""
        return False

    def checkpoint_group(self) -> Any:
        """Return the group sharded checkpoints coordinate over, or None for one process. It is gloo, which a
        background save needs, and its own, so a background save's collectives never interleave with training's.
        It is made on first use, a collective, as every rank saves or loads together."""
        if self.active and self._checkpoint_group is None:
            self._checkpoint_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.timeout_s))
        return self._checkpoint_group

    def sharded_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Return {model, optimizer} as this rank holds them (FSDP shards, or whole tensors), keyed by parameter
        name for every strategy. `lab.checkpointing.sharded` writes this and reads it back, resharded to the reader."""
        api, _ = _state_dict_api()
        weights, moments = api.get_state_dict(model, optimizer)
        return {"model": weights, "optimizer": moments}

    def load_sharded_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, directory: str) -> None:
        """Load weights and optimizer moments from a sharded checkpoint, on any number of ranks and any strategy."""
        api, _ = _state_dict_api()
        state = self.sharded_state(model, optimizer)
        checkpointing.sharded.load(state, directory, self.checkpoint_group())
        api.set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])

    def model_state(self, model: nn.Module) -> dict[str, Any]:
        """Return full, unsharded, wrapper-free weights (on rank 0 for FSDP)."""
        return model.state_dict()

    def optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Return the optimizer state keyed by parameter name, so a checkpoint resumes under any other strategy."""
        api, full = _state_dict_api()
        return api.get_optimizer_state_dict(model, optimizer, options=full)

    def load_model_state(self, model: nn.Module, state: dict[str, Any]) -> None:
        checkpointing.load_model_state(model, state)

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        if not state.get("state"):
            # No per-parameter state (SGD without momentum). torch's loader cannot tell which device an empty state
            # belongs on and fails, though only the group hyperparameters (lr, weight decay...) need restoring.
            for group, saved in zip(optimizer.param_groups, state["param_groups"]):
                group.update({key: value for key, value in saved.items() if key != "params"})
            return
        api, _ = _state_dict_api()
        api.set_optimizer_state_dict(model, optimizer, state, options=api.StateDictOptions(full_state_dict=True))


@dataclass
class ProcessGroup(Parallel):
    """A strategy of one process per rank, joined into a process group by `lab.distributed.launch`."""

    @property
    def active(self) -> bool:
        """Whether this process is in a process group. Methods reduce and wrap only then; a test may build one alone."""
        return dist.is_initialized()


@dataclass
class DDP(ProcessGroup):
    """DistributedDataParallel (dist=ddp): every rank holds the whole model, and gradients are all-reduced."""

    name: ClassVar[str] = "ddp"
    find_unused_parameters: bool = False

    def _wrapped(self, model: nn.Module, device: torch.device, precision: Any, model_cfg: Any) -> tuple[nn.Module, Any]:
        return model, self._ddp(model, device.index if device.type == "cuda" else None)

    def _ddp(self, model: nn.Module, device_index: int | None) -> nn.Module:
        return nn.parallel.DistributedDataParallel(
            model,
            device_ids=None if device_index is None else [device_index],
            find_unused_parameters=self.find_unused_parameters,
        )

    def rewrap(self, model: nn.Module, wrapped: Any) -> Any:
        if not isinstance(wrapped, nn.parallel.DistributedDataParallel):
            return wrapped
        return self._ddp(model, wrapped.device_ids[0] if wrapped.device_ids else None)

    def accumulation(self, forward: Any, sync: bool) -> contextlib.AbstractContextManager:
        return _NO_CONTEXT if sync or not self.active else forward.no_sync()

    def evaluation_forward(self, model: nn.Module, forward: Any) -> Any:
        """Return the plain module, since DDP's forward would broadcast buffers and expect a backward."""
        return model


@dataclass
class FSDP(ProcessGroup):
    """FSDP2 (fully_shard): parameters, gradients and optimizer state are sharded over ranks, and so are checkpoints."""

    name: ClassVar[str] = "fsdp"
    shards_weights: ClassVar[bool] = True
    reshard_after_forward: bool = True

    def _wrapped(self, model: nn.Module, device: torch.device, precision: Any, model_cfg: Any) -> tuple[nn.Module, Any]:
        """Shard each of the model option's `fsdp_units` (by default every top-level block that owns parameters),
        then the root, so gathers overlap per block.

        BatchNorm modules get their own fp32 unit first. Under a bf16/fp16 param policy their weights would be cast
        while their running statistics stay fp32, which batch_norm rejects. fp32 statistics are the numerically
        sound choice anyway, as under autocast in one process."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        dtype = precision.autocast_dtype
        # params compute in the precision group's dtype; gradients are reduced in fp32 for accuracy
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        reshard = self.reshard_after_forward
        batch_norm = nn.modules.batchnorm._BatchNorm  # BatchNorm1d/2d/3d and SyncBatchNorm
        norms = [m for m in model.modules() if isinstance(m, batch_norm) and any(True for _ in m.parameters())]
        if dtype is not None:
            for norm in norms:
                fully_shard(norm, reshard_after_forward=reshard, mp_policy=MixedPrecisionPolicy())
        for unit in options.instantiate("model", model_cfg).fsdp_units(model):
            if not (dtype is not None and unit in norms):  # a top-level BatchNorm is its own unit already
                fully_shard(unit, reshard_after_forward=reshard, mp_policy=policy)
        # the module itself, its class now an FSDPModule subclass (torch types the return as the mixin alone)
        sharded = cast(nn.Module, fully_shard(model, reshard_after_forward=reshard, mp_policy=policy))
        return sharded, sharded

    def accumulation(self, forward: Any, sync: bool) -> contextlib.AbstractContextManager:
        if self.active:
            forward.set_requires_gradient_sync(sync)
        return _NO_CONTEXT

    @property
    def shards_checkpoints(self) -> bool:
        return self.active

    def model_state(self, model: nn.Module) -> dict[str, Any]:
        if not self.active:
            return super().model_state(model)
        api, full = _state_dict_api()
        return api.get_model_state_dict(model, options=full)

    def load_model_state(self, model: nn.Module, state: dict[str, Any]) -> None:
        if not self.active:
            return super().load_model_state(model, state)
        api, full = _state_dict_api()
        api.set_model_state_dict(model, checkpointing.strip_wrapper_prefixes(state), options=full)
