"""The `dist` kind: the keys every strategy has; each strategy is an option (lab/distributed/options.py) named under
`strategy`. It builds its strategy object (lab.distributed.parallel) and says what the rest of the run needs to know
(`spawns_ranks`, `shards_weights`), so no code compares a strategy's name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING

from lab.config.checks import at_least
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option


@dataclass
class DistConfig(Option, group="dist", key="strategy"):
    """Keys of every strategy; LR scaling applies to one process too, as accumulation grows the effective batch."""

    # One process per rank, started by scripts/train.py (lab.distributed.launch) or by torchrun/srun.
    spawns_ranks: ClassVar[bool] = False
    # Each rank holds a shard of the weights, so anything that needs the whole model on every rank is refused.
    shards_weights: ClassVar[bool] = False

    strategy: str = MISSING  # set by the option; choose with dist=none|ddp|fsdp
    lr_scaling: str = "none"  # none | linear | sqrt: lr *= (effective batch / base_batch_size)^(1 or 1/2)
    base_batch_size: int | None = None  # effective batch optimizer.lr was tuned for; null = data.batch_size

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("dist.lr_scaling", self.lr_scaling, ("none", "linear", "sqrt"))
        at_least("dist.base_batch_size", self.base_batch_size, 1, or_null=True)

    def build(self, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Any:
        """Return this rank's strategy object (a `lab.distributed.parallel.Parallel`), once the rank is in its
        process group."""
        raise NotImplementedError(f"{type(self).__name__} has no build()")

    def model_on_meta(self, model_cfg: Any, data_meta: Any) -> Any:
        """Return the model built on the meta device, to be initialised once sharded (lab.distributed.meta_init), or
        None to build it whole, as every strategy but dist=fsdp does. It may refuse the model, before any record."""
        return None


@dataclass
class ProcessGroupConfig(DistConfig, abstract=True):
    """Keys of strategies that run one process per rank in a process group (lab.distributed.launch)."""

    nproc: Any = "auto"  # processes on this node: auto = one per GPU, 2 on a CPU-only machine
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | nccl | gloo
    sync_bn: bool = False  # SyncBatchNorm (CUDA only): batch statistics over all ranks, for small per-GPU batches
    master_port: int | None = None  # spawned jobs: rendezvous port; null = a free one per multirun job
    timeout_s: float = 600.0  # collective timeout, so a stuck rank fails the job instead of hanging it
    max_restarts: int = 0  # spawned jobs: restarts of all workers after a crash, each resuming from last.pt
    grace_s: int = 10  # spawned jobs: seconds ranks get to save and exit on a stop signal or another rank's failure

    spawns_ranks: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("dist.max_restarts", self.max_restarts, 0)
        at_least("dist.grace_s", self.grace_s, 1)
        _require(
            self.nproc == "auto" or (isinstance(self.nproc, int) and self.nproc >= 1),
            f"dist.nproc must be auto or an int >= 1, got {self.nproc!r}",
        )
        _one_of("dist.backend", self.backend, ("auto", "nccl", "gloo"))
        at_least("dist.timeout_s", self.timeout_s, 0, strict=True)


def meta_init_refused(why: str) -> str:
    """Return the one-line refusal of dist.meta_init=true for a model the meta-device init cannot replay."""
    return (
        f"dist.meta_init=true cannot build this model on the meta device: {why}; set dist.meta_init=auto (or false) "
        "to build the whole model on every rank before sharding it"
    )
