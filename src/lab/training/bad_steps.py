"""Skip steps whose loss is not finite instead of ending the run, up to `trainer.max_bad_steps` in a row.

Off by default, because reading a step's loss before its update costs one host sync per step. Without it, a
non-finite loss still stops the run at the next log line or checkpoint, naming the step (see `lab.training.window`).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import torch

from lab.distributed.parallel import Parallel
from lab.errors import UserError

if TYPE_CHECKING:
    from lab.training.state import Progress

log = logging.getLogger(__name__)


class BadSteps:
    def __init__(self, limit: int, parallel: Parallel) -> None:
        self.limit, self.parallel = limit, parallel
        self.total = 0  # steps skipped in the run so far (logged as train/bad_steps)
        self.in_a_row = 0
        self.last_finite = math.nan

    def finite(self, losses: list[torch.Tensor], weight: torch.Tensor, progress: Progress) -> bool:
        """Return whether this step's loss is finite on every rank, so all ranks skip the same steps. More than
        `limit` non-finite steps in a row raise a `UserError` naming the step and epoch."""
        loss = float(self.parallel.mean_over_ranks(torch.stack(losses).detach().sum()) / weight)
        if math.isfinite(loss):
            self.in_a_row, self.last_finite = 0, loss
            return True
        self.total += 1
        self.in_a_row += 1
        step, epoch = progress.global_step + 1, progress.epoch + 1
        if self.in_a_row > self.limit:
            raise UserError(
                f"loss was {loss} for {self.in_a_row} optimizer steps in a row, the last at step {step} (epoch "
                f"{epoch}); the last finite loss was {self.last_finite:.4g}: lower optimizer.lr, set "
                "trainer.grad_clip, try precision=bf16 or fp32, or check the inputs"
            )
        log.warning(
            "step %d (epoch %d): loss %s, update skipped (%d in a row, trainer.max_bad_steps=%d)",
            step,
            epoch,
            loss,
            self.in_a_row,
            self.limit,
        )
        return False
