"""TensorBoard: event files in `<run dir>/tensorboard/` (`tensorboard --logdir outputs` shows every run).

Metrics are scalars at step = global optimizer step (plus `epoch`); the resolved config with the git commit,
branch and dirty flag is the text `config` (YAML), the final summary the text `summary`. A run continuing in its
own dir writes a further event file into the same folder, which TensorBoard reads as one run. A new run in a dir
that held another (`overwrite=true`) first removes that run's event files: TensorBoard would read both as one run,
two curves over the same steps drawn as one zigzag.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from lab.errors import UserError
from lab.tracking.backends import Backend, number, plain, writing

EVENT_FILES = "events.out.tfevents.*"  # the names torch's SummaryWriter gives its event files


def as_markdown_code(text: str) -> str:
    """TensorBoard renders text as Markdown: indented lines keep YAML's layout."""
    return "\n".join(f"    {line}" for line in text.splitlines())


class TensorBoardBackend(Backend):
    name = "tensorboard"
    folder = "tensorboard"

    def start(self) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as err:  # torch's writer needs the tensorboard package
            raise UserError(
                f"logger=tensorboard needs the tensorboard package: pip install tensorboard ({err})"
            ) from err
        self.dir = self.run.run_dir / self.folder
        with writing(self.dir):
            if not self.run.continuing:
                for replaced in self.dir.glob(EVENT_FILES):
                    replaced.unlink()
            # a continuing run hides what its previous attempt logged after the checkpoint it resumed from: those
            # steps are logged again (TensorBoard purges the earlier events from that step on)
            resumed = self.run.resumed_step if self.run.continuing else None
            self.writer = SummaryWriter(log_dir=str(self.dir), purge_step=None if resumed is None else resumed + 1)
        self._summary: dict[str, Any] = {}
        self._last_step = 0
        config = {**plain(self.run.config), "provenance": plain(self.run.git)}
        self.writer.add_text("config", as_markdown_code(yaml.safe_dump(config, sort_keys=False)), global_step=0)
        self.writer.flush()

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        for key, value in metrics.items():
            scalar = number(value)
            if scalar is not None:
                self.writer.add_scalar(key, scalar, global_step=step)
        if epoch is not None:
            self.writer.add_scalar("epoch", epoch, global_step=step)
        self._last_step = max(self._last_step, step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self._summary.update(values)

    def finish(self, status: str) -> dict[str, Any]:
        summary = {**plain(self._summary), "status": status}
        text = as_markdown_code(yaml.safe_dump(summary, sort_keys=False))
        self.writer.add_text("summary", text, global_step=self._last_step)
        self.writer.close()
        return {"tensorboard_dir": str(self.dir)}
