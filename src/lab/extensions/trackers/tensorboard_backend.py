"""TensorBoard: event files in `<run dir>/tensorboard/`; `tensorboard --logdir outputs` shows every run.

Metrics are scalars at the global optimizer step, plus `epoch`. The resolved config with git info is the text
`config` (YAML), and the final summary is the text `summary`. A resumed run adds an event file to the same folder,
which TensorBoard reads as one run. A new run in a used dir (`overwrite=true`) first removes the old event files,
or TensorBoard would draw both runs as one zigzag curve.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from lab.errors import UserError
from lab.tracking.backends import Backend, number, plain, writing

EVENT_FILES = "events.out.tfevents.*"  # the names torch's SummaryWriter gives event files


def as_markdown_code(text: str) -> str:
    """Indent `text` as a Markdown code block, so TensorBoard keeps YAML's layout."""
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
            # a resumed run logs the steps after its checkpoint again, so purge the earlier events from there on
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
