"""The `dist` strategies the core ships (the kind's keys: lab.config.distributed): each builds its `Parallel`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from lab.config.checks import require as _require
from lab.config.distributed import DistConfig, ProcessGroupConfig

if TYPE_CHECKING:
    from lab.distributed.parallel import Parallel


@dataclass
class NoDistConfig(DistConfig, name="none"):
    """One process: no process group, no wrappers."""

    def build(self, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Parallel:
        from lab.distributed.parallel import Parallel

        return Parallel()


@dataclass
class DDPConfig(ProcessGroupConfig):
    """DistributedDataParallel: every rank holds the whole model, and gradients are all-reduced.

    One process per GPU, or 2 gloo processes on a CPU-only machine. `python scripts/train.py dist=ddp` spawns the
    processes itself; under torchrun/srun it joins the existing ones. data.batch_size is per process, so the
    effective batch is batch_size x processes x trainer.grad_accum_steps."""

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


@dataclass
class FSDPConfig(ProcessGroupConfig):
    """FSDP2 (`fully_shard`): parameters, gradients and optimizer state sharded over ranks.

    Mixed precision follows the precision group (params in its dtype, fp32 reductions). Each rank writes its own
    part of a checkpoint (lab.checkpointing.sharded), and a run resumes from it on any number of ranks."""

    reshard_after_forward: bool = True  # free gathered parameters after forward (less memory, one more gather)
    # Build the model on the meta device and draw its initial weights shard by shard, so no rank holds the whole
    # model (lab.distributed.meta_init). The weights are bitwise the same. auto: when the model can be replayed,
    # else build it whole on every rank and say why. true: refuse a model that cannot be replayed. false: never.
    meta_init: Any = "auto"

    shards_weights: ClassVar[bool] = True

    def build(self, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Parallel:
        from lab.distributed.parallel import FSDP

        return FSDP(
            rank, local_rank, world_size, self.timeout_s, self.sync_bn, reshard_after_forward=self.reshard_after_forward
        )

    def model_on_meta(self, model_cfg: Any, data_meta: Any) -> Any:
        from lab.distributed import meta_init

        return meta_init.build(model_cfg, data_meta, self)

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            self.meta_init == "auto" or isinstance(self.meta_init, bool),
            f"dist.meta_init must be auto, true or false, got {self.meta_init!r}",
        )
