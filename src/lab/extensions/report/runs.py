"""Read what a report shows from disk.

That is one run dir or a sweep's job dirs (the run-dir contract in DESIGN.md), plus the eval, export and infer runs
made from their checkpoints."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lab.errors import UserError
from lab.sweeps.summary import JOB_RECORD, Row, collect, sort_rows

DERIVED_KINDS = ("eval", "export", "infer")
# files of a training run dir worth a link, in display order, if present
RUN_FILES = (
    "checkpoints/best.pt",
    "checkpoints/last.pt",
    "summary.json",
    "metrics.jsonl",
    "model_summary.txt",
    "provenance/git.diff",
    "provenance/env.json",
    ".hydra/config.yaml",
    "csv/metrics.csv",
    "tensorboard",
    "profile_table.txt",
    "profile_trace.json",
    "report.html",
)


@dataclass
class Derived:
    """An eval, export or infer run made from a checkpoint (or export) of a run in the report."""

    kind: str
    dir: Path
    summary: dict[str, Any]
    files: list[Path]


@dataclass
class Run:
    dir: Path
    name: str  # "job 3" in a sweep, the dir's name otherwise
    metrics: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]
    overrides: list[str]
    status: str
    value: float | None = None  # the optimized metric (sweeps)
    wall_s: float | None = None
    error: str | None = None
    derived: list[Derived] = field(default_factory=list)

    def files(self) -> list[Path]:
        found = [self.dir / name for name in RUN_FILES if (self.dir / name).exists()]
        return found + sorted(self.dir.glob("*.log"))


@dataclass
class Report:
    dir: Path
    kind: str  # "run" | "sweep"
    runs: list[Run]  # a sweep's best first
    metric: str | None  # the optimized metric
    direction: str  # "maximize" | "minimize"

    @property
    def best(self) -> Run | None:
        first = self.runs[0] if self.runs else None
        return first if first is not None and first.status == "completed" and first.value is not None else None


def is_run_dir(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file() or (path / "summary.json").is_file()


def _job_dirs(path: Path) -> list[Path]:
    return sorted((p for p in path.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def is_sweep_dir(path: Path) -> bool:
    return (path / "multirun.yaml").is_file() or (path / "sweep_summary.csv").is_file() or bool(_job_dirs(path))


def load(path: Path) -> Report:
    if not path.exists():
        raise UserError(
            f"{path} does not exist: pass a run dir (outputs/train/<stamp>) or a sweep dir "
            "(outputs/train/multirun/<stamp>)"
        )
    if not path.is_dir():
        raise UserError(
            f"{path} is not a directory: pass a run dir (outputs/train/<stamp>) or a sweep dir "
            "(outputs/train/multirun/<stamp>)"
        )
    if is_run_dir(path):
        run = _read_run(path, path.name)
        report = Report(path, "run", [run], _monitored(run.config), _direction(run.config))
    elif is_sweep_dir(path):
        report = _read_sweep(path)
    else:
        what = "is empty" if not any(path.iterdir()) else "holds no metrics.jsonl, summary.json or job dirs"
        raise UserError(
            f"{path} {what}: pass a run dir (metrics.jsonl, summary.json) or a sweep dir "
            "(numbered job dirs, sweep_summary.csv), e.g. outputs/train/<stamp>"
        )
    _attach_derived(report)
    return report


def _read_sweep(path: Path) -> Report:
    jobs = [d for d in _job_dirs(path) if is_run_dir(d) or (d / JOB_RECORD).is_file()]
    if not jobs:
        raise UserError(
            f"{path} is a sweep dir whose jobs have written nothing yet (no <job>/metrics.jsonl): "
            "wait for the first job, or pass one that ran"
        )
    config = next((c for c in (_config(d) for d in jobs) if c), {})
    metric, direction = config.get("optimized_metric") or _monitored(config), _direction(config)
    rows = {row.run_dir: row for row in collect(path, metric or "value")}
    for job in jobs:  # a job still running or killed has no record yet
        rows.setdefault(str(job), Row(int(job.name), "", None, None, None, _overrides(job), str(job), None))
    runs = []
    for row in sort_rows(list(rows.values()), direction):
        run = _read_run(Path(row.run_dir), f"job {row.job}", overrides=row.overrides)
        run.status = row.status or run.status
        run.value = row.value if row.value is not None else _number(run.summary.get(metric or ""))
        run.wall_s, run.error = row.wall_s, row.error
        runs.append(run)
    if not any(row.status for row in rows.values()):  # no job records, so rank by the summaries
        runs = _ranked_by_value(runs, direction)
    return Report(path, "sweep", runs, metric, direction)


def _ranked_by_value(runs: list[Run], direction: str) -> list[Run]:
    sign = -1 if direction == "maximize" else 1
    return sorted(runs, key=lambda r: (r.status != "completed", r.value is None, sign * (r.value or 0.0)))


def _read_run(path: Path, name: str, overrides: list[str] | None = None) -> Run:
    summary = _json(path / "summary.json")
    config = _config(path)
    status = summary.get("status") or ("running or killed" if (path / "metrics.jsonl").is_file() else "no output")
    overrides = _overrides(path) if overrides is None else overrides
    run = Run(path, name, read_metrics(path / "metrics.jsonl"), summary, config, overrides, status)
    run.value = _number(summary.get(config.get("optimized_metric") or _monitored(config) or ""))
    return run


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read every event of a metrics.jsonl, skipping a line cut short by a run still writing or killed."""
    events = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _config(run_dir: Path) -> dict[str, Any]:
    """Load the run's config from .hydra/config.yaml, resolving interpolations where possible.

    `${hydra:...}` cannot be resolved outside Hydra, so then the raw text is shown."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        return {}
    import lab.config  # noqa: F401  (registers the lab.* resolvers the YAML refers to)

    try:
        cfg = OmegaConf.load(path)
    except (OSError, yaml.YAMLError, OmegaConfBaseException):
        return {}
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        data = OmegaConf.to_container(cfg, resolve=False)
    return cast("dict[str, Any]", data) if isinstance(data, dict) else {}  # a config's keys are str


def _overrides(run_dir: Path) -> list[str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else []
    except yaml.YAMLError:
        return []
    return [str(o) for o in data] if isinstance(data, list) else []


def _monitored(config: dict[str, Any]) -> str | None:
    monitor = (config.get("task") or {}).get("monitor")
    return f"val/{monitor}_best" if monitor else None


def _direction(config: dict[str, Any]) -> str:
    direction = (config.get("sweep") or {}).get("direction")
    if direction in ("maximize", "minimize"):
        return direction
    return "minimize" if (config.get("task") or {}).get("mode") == "min" else "maximize"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def split_override(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def outputs_root(path: Path) -> Path | None:
    """Find the outputs/ folder of a run or sweep dir: the nearest ancestor holding eval/, export/ or infer/."""
    for folder in list(path.resolve().parents)[:4]:
        if any((folder / kind).is_dir() for kind in DERIVED_KINDS):
            return folder
    return None


def _ckpt_path(run_dir: Path, root: Path) -> Path | None:
    ckpt = _yaml_dict(run_dir / ".hydra" / "config.yaml").get("ckpt_path")
    if not isinstance(ckpt, str) or not ckpt:
        return None
    path = Path(ckpt).expanduser()
    # a relative path is relative to where the command ran, usually the project root that holds outputs/
    return (path if path.is_absolute() else root.parent / path).resolve()


def _yaml_dict(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _attach_derived(report: Report) -> None:
    root = outputs_root(report.dir)
    if root is None:
        return
    owners: dict[Path, Run] = {run.dir.resolve(): run for run in report.runs}
    for kind in DERIVED_KINDS:  # eval and export first, since an infer run may use an export's model file
        for run_dir in sorted({*root.glob(f"{kind}/*/"), *root.glob(f"{kind}/multirun/*/*/")}):
            ckpt = _ckpt_path(run_dir, root)
            owner = next((owners[p] for p in ckpt.parents if p in owners), None) if ckpt else None
            if owner is None:
                continue
            files = sorted(p for p in run_dir.iterdir() if not p.name.startswith(".") and p.name != "wandb")
            owner.derived.append(Derived(kind, run_dir, _json(run_dir / "summary.json"), files))
            owners[run_dir.resolve()] = owner
