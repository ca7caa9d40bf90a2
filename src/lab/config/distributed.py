"""The `dist` group: the keys every strategy has, plus one option per strategy (lab.config.options; its name is
under `strategy`), so a key of another strategy (`dist=none dist.nproc=4`, `dist=ddp
dist.reshard_after_forward=false`) is refused while composing. Each option builds its strategy object
(lab.distributed.parallel), and says what the rest of the run needs to know of it (`spawns_ranks`, `shards_weights`):
no code compares a strategy's name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import MISSING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option

if TYPE_CHECKING:
    from lab.distributed.parallel import Parallel


@dataclass
class DistConfig(Option, group="dist", key="strategy"):
    """Keys of every strategy. The lr scaling applies to one process too: gradient accumulation also grows the
    effective batch (per device x processes x trainer.grad_accum_steps)."""

    # one process per rank: scripts/train.py starts them (lab.distributed.launch), or torchrun/srun did
    spawns_ranks: ClassVar[bool] = False
    # each rank holds a shard of the weights: what needs the whole model on every rank is refused with it
    shards_weights: ClassVar[bool] = False

    strategy: str = MISSING  # fixed by the option's schema: choose with dist=none|ddp|fsdp
    lr_scaling: str = "none"  # none | linear | sqrt: lr *= (effective batch / base_batch_size)^(1 or 1/2)
    base_batch_size: int | None = None  # the effective batch optimizer.lr was tuned for; null = data.batch_size

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("dist.lr_scaling", self.lr_scaling, ("none", "linear", "sqrt"))
        _require(
            self.base_batch_size is None or self.base_batch_size >= 1,
            f"dist.base_batch_size must be >= 1 or null, got {self.base_batch_size}",
        )

    def build(self, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Parallel:
        """The strategy object of this rank (rank 0 of 1 alone), once it is in its process group."""
        from lab.distributed.parallel import Parallel

        return Parallel()


@dataclass
class NoDistConfig(DistConfig, name="none"):
    """One process: no process group, no wrappers."""


@dataclass
class ProcessGroupConfig(DistConfig, abstract=True):
    """Keys of the strategies that run one process per rank in a process group (lab.distributed.launch)."""

    nproc: Any = "auto"  # processes on this node: auto = one per GPU, 2 on a CPU-only machine
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | nccl | gloo
    sync_bn: bool = False  # SyncBatchNorm (CUDA only): batch statistics over all ranks, for small per-GPU batches
    master_port: int | None = None  # spawned jobs: rendezvous port; null = a free one (each multirun job its own)
    timeout_s: float = 600.0  # collective timeout: a stuck rank fails the job instead of hanging it
    max_restarts: int = 0  # spawned jobs: start all workers again this often after a crash, resuming from last.pt
    grace_s: int = 10  # spawned jobs: seconds ranks get to save and exit (a stop signal, another rank's failure)

    spawns_ranks: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.max_restarts >= 0, f"dist.max_restarts must be >= 0, got {self.max_restarts}")
        _require(self.grace_s >= 1, f"dist.grace_s must be >= 1, got {self.grace_s}")
        _require(
            self.nproc == "auto" or (isinstance(self.nproc, int) and self.nproc >= 1),
            f"dist.nproc must be auto or an int >= 1, got {self.nproc!r}",
        )
        _one_of("dist.backend", self.backend, ("auto", "nccl", "gloo"))
        _require(self.timeout_s > 0, f"dist.timeout_s must be > 0, got {self.timeout_s}")


@dataclass
class DDPConfig(ProcessGroupConfig):
    """DistributedDataParallel, one process per GPU (2 gloo processes on a CPU-only machine): every rank holds the
    whole model; gradients are all-reduced. `python scripts/train.py dist=ddp` spawns the processes itself; under
    torchrun/srun it joins the existing ones. data.batch_size is per process: the effective batch is batch_size x
    processes x trainer.grad_accum_steps; dist.lr_scaling=linear|sqrt scales optimizer.lr by effective batch /
    dist.base_batch_size."""

    find_unused_parameters: bool = False  # only for models whose forward skips parameters

    def build(self, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Parallel:
        from lab.distributed.parallel import DDP

        return DDP(
            rank,
            local_rank,
            world_size,
            self.timeout_s,
            self.sync_bn,
            find_unused_parameters=self.find_unused_parameters,
        )


def meta_init_refused(why: str) -> str:
    """The one-line refusal of dist.meta_init=true for a model the meta-device init cannot replay (`why`)."""
    return (
        f"dist.meta_init=true cannot build this model on the meta device: {why}; set dist.meta_init=auto (or false) "
        "to build the whole model on every rank before sharding it"
    )


@dataclass
class FSDPConfig(ProcessGroupConfig):
    """FSDP2 (torch.distributed.fsdp.fully_shard): parameters, gradients and optimizer state sharded over ranks.
    Mixed precision follows the precision group (params in its dtype, fp32 reductions). Checkpoints are sharded:
    each rank writes its own part (lab.checkpointing.sharded), and they resume on any number of ranks."""

    reshard_after_forward: bool = True  # free gathered parameters after forward (less memory, one more gather)
    # build the model on the meta device and draw its initial weights shard by shard (the same weights, bitwise, as
    # the whole build), so no rank holds the whole model (lab.distributed.meta_init). auto: when the model can be
    # replayed, else the whole build on every rank, saying why; true: such a model is refused; false: never
    meta_init: Any = "auto"

    shards_weights: ClassVar[bool] = True

    def build(self, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Parallel:
        from lab.distributed.parallel import FSDP

        return FSDP(
            rank, local_rank, world_size, self.timeout_s, self.sync_bn, reshard_after_forward=self.reshard_after_forward
        )

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            self.meta_init == "auto" or isinstance(self.meta_init, bool),
            f"dist.meta_init must be auto, true or false, got {self.meta_init!r}",
        )
