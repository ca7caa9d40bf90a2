"""A run's checkpoints: where they live, when they are written, which one is best, and who writes them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.checkpointing import storage
from lab.files import remove_stale_temps

if TYPE_CHECKING:
    from lab.distributed.parallel import Parallel

log = logging.getLogger(__name__)


class CheckpointManager:
    """`<run dir>/checkpoints/last.pt` after every epoch (and every `every_n_steps` optimizer steps when > 0), copied
    to `best.pt` when the monitored metric improved. `extras` (resolved config, data_meta, provenance) go into every
    file: they are what eval, export and infer rebuild the model and its data from. `run_ref` (the trackers' names
    for this run: run dir, wandb id) joins the provenance at the first save, not before: wandb may still be starting
    in its child process while the first steps run."""

    def __init__(
        self,
        run_dir: str | Path,
        parallel: Parallel,
        every_n_steps: int = 0,
        extras: dict | None = None,
        run_ref: Callable[[], dict[str, Any]] | None = None,
    ):
        self.dir = Path(run_dir) / "checkpoints"
        self.parallel, self.every_n_steps = parallel, every_n_steps
        self.extras = dict(extras or {})
        self._run_ref = run_ref
        if parallel.is_main:
            for stale in remove_stale_temps(self.dir):
                log.warning("removed %s: a save that never completed (the process was killed mid-write)", stale)

    @property
    def last(self) -> Path:
        return self.path("last")

    @property
    def best(self) -> Path:
        return self.path("best")

    def path(self, which: str) -> Path:
        return self.dir / f"{which}.pt"

    def due(self, global_step: int) -> bool:
        """A mid-epoch checkpoint is due after this optimizer step."""
        return self.every_n_steps > 0 and global_step % self.every_n_steps == 0

    def save(self, state: dict[str, Any], best: bool) -> None:
        """Every rank calls this (the state was gathered collectively); rank 0 writes and the others wait, so no
        rank reads a half-written file and none runs ahead of a checkpoint it might need."""
        if self.parallel.is_main:
            if self._run_ref is not None:
                self.extras["provenance"] = {**self.extras.get("provenance", {}), **self._run_ref()}
                self._run_ref = None
            storage.save(self.last, {**state, **self.extras})
            if best:
                storage.copy(self.last, self.best)
        self.parallel.barrier()
