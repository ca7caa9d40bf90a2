"""Write plain files anything can read to `<run dir>/csv/`: `metrics.csv` and `config.yaml`.

`metrics.csv` has a row per event: `step`, `epoch`, then one column per metric. `config.yaml` is the resolved config
with the git commit, branch and dirty flag under `provenance`.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from typing import Any

import yaml

from lab.files import atomic_path
from lab.tracking.backends import Backend, open_record, plain, writing


def _row_step(line: str) -> int | None:
    """Return a row's step, its first cell, or None for the header."""
    first = line.split(",", 1)[0]
    return int(first) if first.isdigit() else None


class CsvBackend(Backend):
    name = "csv"
    folder = "csv"

    def start(self) -> None:
        self.dir = self.run.run_dir / self.folder
        self.path = self.dir / "metrics.csv"
        self.columns = ["step", "epoch"]
        config = {**plain(self.run.config), "provenance": plain(self.run.git)}
        with writing(self.dir):
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            self._file = open_record(
                self.path, self.run.continuing, self.run.resumed_step, step_of=_row_step, newline=""
            )
        if self.run.continuing and self.path.stat().st_size:  # keep the rows and columns
            with open(self.path, newline="") as handle:
                self.columns = next(csv.reader(handle), []) or self.columns
        self._start_writer()

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        row = {"step": step, "epoch": epoch, **{key: plain(value) for key, value in metrics.items()}}
        new = [key for key in row if key not in self.columns]
        if new:  # rewrite the file with the wider header, earlier rows getting empty cells: once per new metric name
            self._file.close()
            with open(self.path, newline="") as handle:
                rows = list(csv.DictReader(handle))
            self.columns = [*self.columns, *new]
            with atomic_path(self.path) as partial, open(partial, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=self.columns, restval="")
                writer.writeheader()
                writer.writerows(rows)
            self._file = open_record(self.path, continuing=True, newline="")
            self._start_writer()
        self._writer.writerow(row)

    def finish(self, status: str) -> dict[str, Any]:
        self._file.close()
        return {}

    def _start_writer(self) -> None:
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns, restval="")
        if not self.path.stat().st_size:
            self._writer.writeheader()
