"""The `report` extension: one self-contained HTML page for a run dir or a sweep dir. See README.md here.

    python -m lab.extensions.report <dir> [-o out.html]

`runs` reads what runs left on disk: metrics.jsonl, summary.json, .hydra/, the sweep's job records, and the
eval/export/infer runs made from their checkpoints. `charts` draws the curves as inline SVG. `page` writes the HTML,
with the CSS and table-sorting script of `assets` inline, so nothing is fetched. It is pure Python + OmegaConf with
no torch import, so the report starts in well under a second.
"""

from __future__ import annotations

import os
from pathlib import Path

from lab.errors import UserError
from lab.extensions.report import page, runs
from lab.files import atomic_path

__all__ = ["EXTRAS", "write_report"]
EXTRAS: tuple[str, ...] = ()  # the core's packages are enough


def write_report(source: str | Path, output: str | Path | None = None) -> Path:
    """Write the report of the run or sweep at `source` (default `<source>/report.html`) and return its path."""
    report = runs.load(Path(source))
    out = Path(output) if output is not None else report.dir / "report.html"
    if out.is_dir():
        raise UserError(f"{out} is a directory: give -o a file name, e.g. -o {out / 'report.html'}")
    if not out.parent.is_dir():
        raise UserError(f"the folder of {out} does not exist: create it, or give -o a path in an existing folder")
    text = page.render(report, link_base=out.parent.resolve())
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(os.path.abspath(out))
