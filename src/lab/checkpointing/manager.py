"""A run's checkpoints: where they live, when they are written, which one is best, and who writes them."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import torch

from lab.checkpointing import sharded, storage
from lab.files import remove_stale_temps

log = logging.getLogger(__name__)


class Ranks(Protocol):
    """What saving needs of the ranks: a `Parallel`, typed here because checkpointing sits below it."""

    @property
    def is_main(self) -> bool: ...

    def barrier(self) -> None: ...

    def broadcast(self, obj: Any) -> Any: ...

    def checkpoint_group(self) -> Any: ...


class CheckpointManager:
    """Write `<run dir>/checkpoints/last.pt` after every epoch (and every `every_n_steps` optimizer steps if > 0).

    It is copied to `best.pt` when the monitored metric improved. `extras` (resolved config, data_meta, provenance)
    go into every file. `run_ref` (the trackers' names for the run: run dir, wandb id) joins the provenance at the
    first save, not before, because wandb may still be starting in its child process while the first steps run.

    A state with `shards` (dist=fsdp) is written to a new directory under `checkpoints/shards/`, in the background
    with `async_save`; once it is complete, rank 0 points `last.pt` at it and removes the one it replaces. `best.pt`
    is then one consolidated file of the model alone."""

    def __init__(
        self,
        run_dir: str | Path,
        parallel: Ranks,
        every_n_steps: int = 0,
        extras: dict | None = None,
        run_ref: Callable[[], dict[str, Any]] | None = None,
        async_save: bool = False,
    ):
        self.dir = Path(run_dir) / "checkpoints"
        self.parallel, self.every_n_steps, self.async_save = parallel, every_n_steps, async_save
        self.extras = dict(extras or {})
        self._run_ref = run_ref
        self._pending: Future | None = None  # the background save in flight; on rank 0, until last.pt names it
        if parallel.is_main:
            for stale in remove_stale_temps(self.dir):
                log.warning("removed %s: a save that never completed (the process was killed mid-write)", stale)
            named = None  # the shard directory last.pt names (relative to checkpoints/), read without any tensor
            try:
                if self.last.is_file():
                    named = torch.load(self.last, map_location="cpu", weights_only=True, mmap=True).get("shards")
            except Exception:  # an unreadable last.pt is refused when read, so keep its shards
                return
            for stale in self._prune(keep=named):
                log.warning("removed %s: shards of a save that never completed (killed before last.pt named it)", stale)

    @property
    def last(self) -> Path:
        return self.path("last")

    @property
    def best(self) -> Path:
        return self.path("best")

    def path(self, which: str) -> Path:
        return self.dir / f"{which}.pt"

    def adopt_best(self, resumed: Path) -> None:
        """Copy the best.pt next to `resumed` into this run, so best tracking and the final test score the true
        best. `resumed` may lie in this run's dir or another's."""
        best = resumed.with_name("best.pt")
        if self.parallel.is_main and best.is_file() and not self.best.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            storage.copy(best, self.best)

    def due(self, global_step: int) -> bool:
        """Return whether a mid-epoch checkpoint is due after this optimizer step."""
        return self.every_n_steps > 0 and global_step % self.every_n_steps == 0

    def save(self, state: dict[str, Any], best: bool, final: bool = False, wait: bool = False) -> None:
        """Save `state`. Every rank calls this, as the state was gathered collectively. Rank 0 writes and the others
        wait, so no rank reads a half-written file or runs ahead of a checkpoint it may need. With trainer.async_save
        a sharded save returns once its tensors are in host memory, unless it is `final` (its last.pt also holds the
        consolidated model) or the caller asks to `wait` (a stop signal: the job ends next)."""
        self.wait()  # one save at a time: the previous one is complete, and named by last.pt, before the next
        if self.parallel.is_main and self._run_ref is not None:
            self.extras["provenance"] = {**self.extras.get("provenance", {}), **self._run_ref()}
            self._run_ref = None
        if "shards" in state:
            self._save_sharded(state, best, final, background=self.async_save and not (final or wait))
            return
        if self.parallel.is_main:
            storage.save(self.last, {**state, **self.extras})
            if best:
                storage.copy(self.last, self.best)
            self._prune(keep=None)  # an FSDP run continued in one file no longer needs the shards last.pt named
        self.parallel.barrier()

    def _save_sharded(self, state: dict[str, Any], best: bool, final: bool, background: bool) -> None:
        header = {key: value for key, value in state.items() if key not in ("shards", "model")}
        # a new directory each time (rank 0 names it for all), so the one last.pt names is never written over
        name, step = "", state["progress"]["global_step"]
        if self.parallel.is_main:
            name, n = f"step-{step:09d}", 1
            while (self.dir / sharded.DIR / name).exists():  # a stop signal right after a periodic save
                name, n = f"step-{step:09d}.{n}", n + 1
        name = self.parallel.broadcast(name)
        if self.parallel.is_main and best:
            storage.save(self.best, {**header, "model": state["model"], **self.extras})
        shards = f"{sharded.DIR}/{name}"
        last = {**header, **self.extras, "shards": shards, **({"model": state["model"]} if final else {})}

        def commit() -> None:
            storage.save(self.last, last)
            self._prune(keep=shards)

        writing = sharded.write(state["shards"], self.dir / shards, self.parallel.checkpoint_group(), background)
        if writing is None:
            if self.parallel.is_main:
                commit()
            self.parallel.barrier()
        elif self.parallel.is_main:  # the future completes once every rank's shards and the metadata are written
            self._pending = _after(writing, commit)
        else:
            self._pending = writing

    def wait(self) -> None:
        """Wait until any background save in flight is complete and named by last.pt. Raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _prune(self, keep: str | None) -> list[Path]:
        """Remove the shard directories other than `keep`: the one last.pt named before, or a killed save's. Only
        `step-*` directories are touched; anything else under shards/ is not this manager's to remove."""
        root = self.dir / sharded.DIR
        ours = sorted(root.glob("step-*")) if root.is_dir() else []
        removed = [entry for entry in ours if entry.is_dir() and f"{sharded.DIR}/{entry.name}" != keep]
        for entry in removed:
            shutil.rmtree(entry)
        return removed


def _after(future: Future, then: Callable[[], None]) -> Future:
    """Return a future done once `future` is and `then` has run (a done-callback would run after waiters wake)."""
    done: Future = Future()

    def finish(_: Future) -> None:
        try:
            future.result()
            then()
            done.set_result(None)
        except BaseException as err:  # raised by the waiter: the next save, or the end of training
            done.set_exception(err)

    future.add_done_callback(finish)
    return done
