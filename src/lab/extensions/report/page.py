"""Render the report as one HTML string with inline CSS, SVG charts and table-sorting script, so it needs no network."""

from __future__ import annotations

import base64
import datetime
import json
import math
import os
import shlex
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from lab.extensions.report.assets import CSS, ERROR_SCRIPT, SORT_SCRIPT
from lab.extensions.report.charts import PALETTE, Series, line_chart
from lab.extensions.report.runs import Derived, Report, Run, split_override

EMBED_IMAGE_BYTES = 300_000  # eval plots up to this size are shown inline


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _cell(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num" data-v="{value!r}">{escape(_fmt(value))}</td>'
    return f"<td>{escape(_fmt(value))}</td>"


def _link(path: Path, base: Path) -> str:
    href = quote(Path(os.path.relpath(path.resolve(), base)).as_posix())
    label = path.name + ("/" if path.is_dir() else "")
    return f'<a href="{href}">{escape(label)}</a>'


def render(report: Report, link_base: Path) -> str:
    title = f"{report.kind.capitalize()} {report.dir.name}"
    body = [f"<h1>{escape(title)}</h1>", _header(report), '<pre id="script-errors" hidden></pre>']
    if report.kind == "sweep":
        body += ["<h2>Jobs</h2>", _sweep_table(report)]
    else:
        body += ["<h2>Summary</h2>", _summary_table(report.runs[0])]
    body += ["<h2>Curves</h2>", _curves(report)]
    body += ["<h2>Config</h2>", _config(report)]
    body += ["<h2>Artifacts</h2>", *(_artifacts(run, link_base, report) for run in report.runs)]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style><script>{ERROR_SCRIPT}</script></head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{SORT_SCRIPT}</script>\n</body></html>\n"
    )


def _header(report: Report) -> str:
    made = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    lines = [f"<code>{escape(str(report.dir.resolve()))}</code>", f"report written {escape(made)}"]
    if report.kind == "sweep":
        lines.append(
            f"{len(report.runs)} jobs, ranked by <code>{escape(str(report.metric))}</code> ({report.direction})"
        )
        if report.best is not None:
            lines.append(
                f"best: <b>{escape(report.best.name)}</b> {escape(str(report.metric))} = {_fmt(report.best.value)}"
            )
    return '<p class="muted">' + "<br>".join(lines) + "</p>"


def _summary_table(run: Run) -> str:
    rows = [f"<tr><th>status</th><td>{escape(run.status)}</td></tr>"]
    rows += [f"<tr><th>{escape(k)}</th>{_cell(v)}</tr>" for k, v in run.summary.items() if k != "status"]
    return "<table>" + "".join(rows) + "</table>"


def _swept_keys(runs: list[Run]) -> list[str]:
    """Return the override keys whose value differs between jobs, or all of them for a single job."""
    values: dict[str, set[str | None]] = {}
    parsed = [dict(split_override(o) for o in run.overrides) for run in runs]
    for key in dict.fromkeys(k for p in parsed for k in p):
        values[key] = {p.get(key) for p in parsed}
    return [k for k, v in values.items() if len(v) > 1 or len(runs) == 1]


def _final_metrics(report: Report) -> list[str]:
    keys = dict.fromkeys(
        k
        for run in report.runs
        for k, v in run.summary.items()
        if k.startswith(("val/", "val_raw/", "test/")) and "/per_class" not in k and isinstance(v, (int, float))
    )
    if report.metric is not None:
        keys.pop(report.metric, None)
    return sorted(keys, key=lambda k: (not k.startswith("val/"), k))


def _sweep_table(report: Report) -> str:
    swept, metrics = _swept_keys(report.runs), _final_metrics(report)
    errors = any(run.error for run in report.runs)
    head = ["rank", "job", "status", *swept, str(report.metric), *metrics, "best epoch", "wall s"]
    head += ["error"] if errors else []
    rows = []
    for rank, run in enumerate(report.runs, 1):
        overrides = dict(split_override(o) for o in run.overrides)
        job = run.name.removeprefix("job ")
        cells = [_cell(rank), _cell(int(job) if job.isdigit() else job), _cell(run.status)]
        cells += [_cell(_parsed(overrides.get(key))) for key in swept]
        cells += [_cell(run.value), *(_cell(run.summary.get(k)) for k in metrics)]
        cells += [_cell(run.summary.get("best_epoch")), _cell(run.wall_s or run.summary.get("elapsed_s"))]
        cells += [_cell(run.error)] if errors else []
        css = ' class="best"' if run is report.best else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    header = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f'<div class="scroll"><table class="sortable" id="jobs"><thead><tr>{header}</tr></thead><tbody>' + (
        "".join(rows) + "</tbody></table></div>"
    )


def _parsed(value: str | None) -> Any:
    """Return an override's value as a number when it is one, so the column sorts numerically."""
    if value is None:
        return None
    try:
        return float(value) if any(c in value for c in ".eE") else int(value)
    except ValueError:
        return value


def _metric_order(key: str, report: Report) -> tuple:
    monitored = report.metric.removesuffix("_best") if report.metric else None
    first = ["train/loss", "val/loss", monitored]
    return (first.index(key) if key in first else len(first), not key.startswith("val/"), key)


def _curves(report: Report) -> str:
    keys = dict.fromkeys(
        k
        for run in report.runs
        for event in run.metrics
        for k, v in event.items()
        if k not in ("step", "epoch")
        and not k.startswith("test/")
        and not k.endswith("_best")
        and isinstance(v, (int, float))
    )
    if not keys:
        return '<p class="muted">no metrics logged yet (metrics.jsonl is empty or missing)</p>'
    colors = {run.dir: PALETTE[i % len(PALETTE)] for i, run in enumerate(report.runs)}
    figures = []
    for key in sorted(keys, key=lambda k: _metric_order(k, report)):
        series = []
        for run in report.runs:
            points = [
                (float(e["step"]), float(e[key]))
                for e in run.metrics
                if isinstance(e.get(key), (int, float)) and isinstance(e.get("step"), (int, float))
            ]
            if points:
                series.append(Series(run.name, points, colors[run.dir], emphasis=run is report.best))
        figures.append(f"<figure><figcaption>{escape(key)}</figcaption>{line_chart(key, series)}</figure>")
    legend = ""
    if len(report.runs) > 1:
        items = [
            f'<span><span class="swatch" style="background:{colors[run.dir]}"></span>{escape(run.name)}'
            + (" (best)" if run is report.best else "")
            + "</span>"
            for run in report.runs
        ]
        legend = f'<div class="legend">{"".join(items)}</div>'
    return legend + f'<div class="charts">{"".join(figures)}</div>'


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _config(report: Report) -> str:
    reference = report.best or report.runs[0]
    parts = []
    if reference.overrides:
        parts.append(
            f"<p>overrides of {escape(reference.name)}: <code>{escape(' '.join(reference.overrides))}</code></p>"
        )
    parts.append(_reproduce(reference, "this run" if report.kind == "run" else reference.name))
    others = [run for run in report.runs if run is not reference]
    if others:
        parts.append(_config_diff(reference, others, is_best=reference is report.best))
    if reference.config:
        text = yaml.safe_dump(reference.config, sort_keys=False, default_flow_style=None)
        parts.append(
            f"<details><summary>full config of {escape(reference.name)}</summary><pre>{escape(text)}</pre></details>"
        )
    else:
        parts.append('<p class="muted">no .hydra/config.yaml in the run dir</p>')
    return "\n".join(parts)


def reproduce_commands(run: Run) -> list[str]:
    """Show the commit, uncommitted changes and overrides of the run as commands to paste."""
    lines = []
    if run.summary.get("git_commit"):
        lines.append(f"git checkout {run.summary['git_commit']}")
    diff = run.dir / "provenance" / "git.diff"
    if run.summary.get("git_dirty") and diff.is_file() and diff.stat().st_size:
        lines.append(f"git apply {shlex.quote(str(diff.resolve()))}")
    task_name = run.config.get("task_name")
    script = task_name if task_name in ("eval", "export", "infer") else "train"
    return [*lines, shlex.join(["python", f"scripts/{script}.py", *run.overrides])]


def _reproduce(run: Run, name: str) -> str:
    text = "\n".join(reproduce_commands(run))
    intro = f"<p>to run {escape(name)} again (its commit, its uncommitted changes, its overrides):</p>"
    return intro + f'<pre id="reproduce">{escape(text)}</pre>'


def _config_diff(reference: Run, others: list[Run], is_best: bool) -> str:
    flat = {run.dir: _flatten(run.config) for run in [reference, *others]}
    keys = dict.fromkeys(k for values in flat.values() for k in values)
    missing = object()
    differing = [k for k in keys if len({json.dumps(f.get(k, missing), default=str) for f in flat.values()}) > 1]
    label = f"{reference.name} (best)" if is_best else reference.name
    if not differing:
        return f"<p>every job's config equals {escape(label)}'s</p>"
    head = "".join(f"<th>{escape(h)}</th>" for h in ["key", label, *(run.name for run in others)])
    rows = []
    for key in differing:
        ref = flat[reference.dir].get(key, missing)
        cells = [f"<td><code>{escape(key)}</code></td>", _cell(None if ref is missing else ref)]
        for run in others:
            value = flat[run.dir].get(key, missing)
            if value == ref:
                cells.append('<td class="same">same</td>')
            else:
                cells.append(_cell("(absent)" if value is missing else value))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    caption = f"<p>keys whose value differs from {escape(label)}'s in at least one job:</p>"
    return (
        caption
        + f'<div class="scroll"><table class="sortable" id="config-diff"><thead><tr>{head}</tr></thead><tbody>'
        + ("".join(rows) + "</tbody></table></div>")
    )


def _artifacts(run: Run, base: Path, report: Report) -> str:
    title = run.name + (" (best)" if run is report.best and report.kind == "sweep" else "")
    files = " · ".join(_link(p, base) for p in run.files()) or '<span class="muted">none</span>'
    parts = [f"<h3>{escape(title)} — {_link(run.dir, base)}</h3>", f"<p>{files}</p>"]
    parts += [_derived(d, base) for d in run.derived]
    return "\n".join(parts)


def _derived(derived: Derived, base: Path) -> str:
    headline = ", ".join(
        f"{k} {_fmt(v)}"
        for k, v in derived.summary.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and "/per_class" not in k
    )
    items = []
    for path in derived.files:
        item = _link(path, base)
        if path.suffix == ".png" and path.stat().st_size <= EMBED_IMAGE_BYTES:
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            item += f'<img class="thumb" alt="{escape(path.name)}" src="data:image/png;base64,{data}">'
        items.append(f"<li>{item}</li>")
    return (
        f"<p><b>{escape(derived.kind)}</b> {_link(derived.dir, base)}"
        + (f' <span class="muted">{escape(headline)}</span>' if headline else "")
        + f"</p><ul>{''.join(items)}</ul>"
    )
