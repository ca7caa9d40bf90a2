"""Write a multirun's table to `<sweep dir>/sweep_summary.{csv,md}` and print it (callback `lab.sweeps.SweepSummary`).

Each job writes `sweep_job.json` into its own run dir when it ends, in the job's process, so it works under the basic,
joblib and submitit launchers. At the end the records are joined with each run's `summary.json`, sorted by the
optimized metric and written out; a sweep with failed jobs then exits non-zero naming them.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from lab import files
from lab.errors import ConfigError, UserError
from lab.sweeps.jobs import outcome, parts
from lab.sweeps.ownership import JOB_RECORD, read_jobs

log = logging.getLogger(__name__)

_STATUS_ORDER = {"completed": 0, "pruned": 1, "interrupted": 2, "failed": 3}
_NOT_SHOWN = ("resume",)  # a resumed sweep's relaunched jobs carry resume=auto, which is not what they train


@dataclass
class Row:
    job: int
    status: str
    value: float | None
    best_epoch: int | None
    wall_s: float | None
    overrides: list[str]
    run_dir: str
    error: str | None
    metrics: dict[str, float] = field(default_factory=dict)  # its summary.json's numbers


def _excluded(override: str, exclude_keys: set[str]) -> bool:
    return override.split("=", 1)[0].lstrip("+~") in exclude_keys


def _last_logged(metrics_file: Path, key: str) -> float | None:
    """Return the last value of `key` in metrics.jsonl, which is what a pruned run reached when it stopped."""
    if not metrics_file.is_file():
        return None
    value = None
    for line in metrics_file.read_text().splitlines():
        event = json.loads(line)
        if isinstance(event.get(key), (int, float)):
            value = float(event[key])
    return value


def collect(sweep_dir: Path, metric: str, exclude_keys: Collection[str] = ()) -> list[Row]:
    """Return one row per job dir of the sweep.

    A killed job (no sweep_job.json) is a failed row, with Hydra's record of its overrides less `exclude_keys`."""
    rows = []
    for job in read_jobs(sweep_dir):
        record = job.record or {
            "status": "failed",
            "value": None,
            "wall_s": None,
            "overrides": [o for o in job.overrides if not _excluded(o, {*exclude_keys, *_NOT_SHOWN})],
            "error": f"no {JOB_RECORD}: the job's process ended before the job did (killed?); see its log",
        }
        summary_file = job.dir / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
        value = record["value"]
        if value is None and record["status"] != "failed":
            value = _last_logged(job.dir / "metrics.jsonl", metric)
        rows.append(
            Row(
                job=job.num,
                status=record["status"],
                value=value,
                best_epoch=summary.get("best_epoch"),
                wall_s=record["wall_s"],
                overrides=record["overrides"],
                run_dir=str(job.dir),
                error=record["error"],
                metrics={k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            )
        )
    return rows


def job_record(
    job: int,
    status: str,
    value: float | None,
    error: str | None,
    overrides: list[str],
    exclude_keys: Collection[str],
    start: float,
    wall_s: float,
    pid: int | None,
) -> dict[str, Any]:
    """Build sweep_job.json, written by the job when it ends or by the launcher for a job whose process died."""
    return {
        "job": job,
        "pid": pid,  # the process that ran it: the sweep's own, a joblib worker, a SLURM task
        "start": start,
        "status": status,
        "value": value,
        "error": error,
        "wall_s": round(wall_s, 2),
        "end": time.time(),
        "overrides": [o for o in overrides if not _excluded(o, {*exclude_keys, *_NOT_SHOWN})],
    }


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    files.write_json(run_dir / JOB_RECORD, record)  # atomic, so a kill mid-write leaves no half record


def sort_rows(rows: list[Row], direction: str) -> list[Row]:
    """Sort completed jobs first, best metric first, then pruned, then failed; ties by job number."""
    sign = -1 if direction == "maximize" else 1

    def key(row: Row) -> tuple:
        missing = row.value is None
        return (_STATUS_ORDER.get(row.status, 4), missing, sign * row.value if row.value is not None else 0.0, row.job)

    return sorted(rows, key=key)


def _varying(rows: list[Row]) -> set[str]:
    """Return the overrides that differ between jobs. The table shows those; the rest are common to all."""
    counts: dict[str, int] = {}
    for row in rows:
        for override in row.overrides:
            counts[override] = counts.get(override, 0) + 1
    return {o for o, n in counts.items() if n < len(rows)} if len(rows) > 1 else set(counts)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *rows])
    return out.getvalue()


def to_csv(rows: list[Row], metric: str) -> str:
    header = ["rank", "job", "status", metric, "best_epoch", "wall_s", "overrides", "run_dir", "error"]
    cells = [
        [n, r.job, r.status, r.value, r.best_epoch, r.wall_s, " ".join(r.overrides), r.run_dir, r.error]
        for n, r in enumerate(rows, 1)
    ]
    return _csv(header, cells)


def to_markdown(rows: list[Row], metric: str) -> str:
    shown = _varying(rows)
    common = sorted({o for row in rows for o in row.overrides} - shown)
    lines = [
        f"| rank | job | status | {metric} | best epoch | wall s | overrides | run dir | error |",
        "|---:|---:|---|---:|---:|---:|---|---|---|",
    ]
    for rank, row in enumerate(rows, 1):
        wall = f"{row.wall_s:.1f}" if row.wall_s is not None else ""
        cells = [rank, row.job, row.status, _fmt(row.value), _fmt(row.best_epoch), wall]
        cells += [" ".join(o for o in row.overrides if o in shown), row.run_dir, row.error or ""]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    if common:
        lines.append(f"\nCommon to every job: `{' '.join(common)}`")
    return "\n".join(lines) + "\n"


@dataclass
class SetRow:
    """One parameter set run as several jobs (`lab.sweeps.jobs.parts`: cross-validation folds)."""

    overrides: list[str]
    jobs: list[Row]
    value: float | None  # the mean of its jobs' optimized metric, None unless every job completed
    stats: dict[str, tuple[float, float]]  # every val/* metric: (mean, population std) over its jobs

    @property
    def status(self) -> str:
        return next((r.status for r in self.jobs if r.status != "completed"), "completed")


def part_key(config: DictConfig, rows: list[Row]) -> str | None:
    """Return the key whose values made parts of the sweep's parameter sets, or None. `expand` appends it last to
    a job's overrides, and the overrides before it, with the sweep's config, ask for the parts."""
    for row in rows:
        found = parts(config, row.overrides[:-1]) if row.overrides else None
        if found is not None and row.overrides[-1].startswith(f"{found[0]}="):
            return found[0]
    return None


def by_parameter_set(rows: list[Row], key: str, direction: str) -> list[SetRow]:
    """Group the jobs that differ only in `key=` and reduce each group: best mean first, unfinished groups last."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in sorted(rows, key=lambda r: r.job):
        groups.setdefault(tuple(o for o in row.overrides if not _excluded(o, {key})), []).append(row)
    sets = []
    for overrides, jobs in groups.items():
        done = all(r.status == "completed" and r.value is not None for r in jobs)
        names = sorted({k for r in jobs for k in r.metrics if k.startswith("val/")})
        stats = {
            k: (statistics.fmean(v), statistics.pstdev(v))
            for k in names
            if len(v := [r.metrics[k] for r in jobs if k in r.metrics]) == len(jobs)
        }
        value = statistics.fmean(r.value for r in jobs if r.value is not None) if done else None
        sets.append(SetRow(list(overrides), jobs, value, stats))
    sign = -1 if direction == "maximize" else 1
    return sorted(sets, key=lambda s: (s.value is None, sign * (s.value or 0.0), s.jobs[0].job))


def sets_to_markdown(sets: list[SetRow], key: str, metric: str) -> str:
    names = sorted({k for s in sets for k in s.stats})
    lines = [
        f"| rank | jobs | status | {metric} (mean) | {' | '.join(f'{k} (mean ± std)' for k in names)} | overrides |",
        "|---:|---|---|---:|" + "---:|" * len(names) + "---|",
    ]
    for rank, s in enumerate(sets, 1):
        cells = [rank, " ".join(str(r.job) for r in s.jobs), s.status, _fmt(s.value)]
        cells += [f"{s.stats[k][0]:.4f} ± {s.stats[k][1]:.4f}" if k in s.stats else "" for k in names]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in [*cells, " ".join(s.overrides)]) + " |")
    return f"One row per parameter set, over its jobs' `{key}`:\n\n" + "\n".join(lines) + "\n"


def sets_to_csv(sets: list[SetRow], metric: str) -> str:
    names = sorted({k for s in sets for k in s.stats})
    header = ["rank", "jobs", "status", metric, *[f"{k}_{w}" for k in names for w in ("mean", "std")], "overrides"]
    cells = []
    for rank, s in enumerate(sets, 1):
        stats = [v for k in names for v in (s.stats.get(k) or ("", ""))]
        cells.append([rank, " ".join(str(r.job) for r in s.jobs), s.status, s.value, *stats, " ".join(s.overrides)])
    return _csv(header, cells)


def record_job(config: DictConfig, job_return: JobReturn, start: float, wall_s: float) -> None:
    """Log a multirun job's failure and write its `sweep_job.json` (lab.sweeps.SweepSummary.on_job_end)."""
    result = outcome(job_return)
    job = config.hydra.job.num
    if result.failed:
        err = job_return._return_value
        # a user mistake is one line; anything else keeps its traceback in the job's log
        trace = None if isinstance(err, (ConfigError, UserError)) else (type(err), err, err.__traceback__)
        log.error("job #%d failed: %s", job, result.error, exc_info=trace)
    elif result.status != "completed":
        log.info("job #%d %s: %s", job, result.status, result.error)
    exclude = config.hydra.job.config.override_dirname.exclude_keys
    overrides = list(job_return.overrides or [])
    record = job_record(job, result.status, result.value, result.error, overrides, exclude, start, wall_s, os.getpid())
    write_record(Path(config.hydra.runtime.output_dir), record)


def write_summary(config: DictConfig, filename: str) -> None:
    """Write and print the multirun's tables; exit non-zero naming its failed jobs (SweepSummary.on_multirun_end)."""
    sweep_dir = Path(config.hydra.sweep.dir)
    metric = OmegaConf.select(config, "optimized_metric", default=None) or "value"
    direction = OmegaConf.select(config, "sweep.direction", default="maximize")
    exclude = config.hydra.job.config.override_dirname.exclude_keys
    rows = sort_rows(collect(sweep_dir, metric, exclude), direction)
    if not rows:
        return
    (sweep_dir / f"{filename}.csv").write_text(to_csv(rows, metric))
    table = to_markdown(rows, metric)
    md = sweep_dir / f"{filename}.md"
    md.write_text(f"# Sweep {sweep_dir}\n\n{table}")
    print(f"\nSweep summary ({len(rows)} jobs, sorted by {metric}, {direction}): {md}")
    print(table)
    key = part_key(config, rows)
    if key is not None:  # the optimized metric is then each parameter set's mean over its parts
        sets = by_parameter_set(rows, key, direction)
        (sweep_dir / f"{filename}_sets.csv").write_text(sets_to_csv(sets, metric))
        table = sets_to_markdown(sets, key, metric)
        with md.open("a") as md_file:
            md_file.write(f"\n## Parameter sets\n\n{table}")
        print(table)
        if sets[0].value is not None:
            jobs = " ".join(str(r.job) for r in sets[0].jobs)
            print(f"best: jobs #{jobs} {metric}={_fmt(sets[0].value)} (mean)  {' '.join(sets[0].overrides)}")
    elif rows[0].status == "completed":
        best = rows[0]
        print(f"best: job #{best.job} {metric}={_fmt(best.value)}  {' '.join(best.overrides)}")
    failed = [row for row in rows if row.status == "failed"]
    if failed:
        # SystemExit, since Hydra turns a callback's exception into a warning and exits 0
        names = "; ".join(f"#{row.job} {row.error}" for row in failed)
        sys.exit(f"error: {len(failed)} of {len(rows)} sweep jobs failed ({names}); overrides and logs: {md}")
