"""Run records: Weights & Biases plus a local mirror in the run directory, behind one small interface.

Every workflow (train, eval, export, infer) does `start()`, `log(metrics, step)`, `summary(values)`, `finish()`.
Whatever the logger, the run dir gets `metrics.jsonl` (one JSON object per event), `summary.json` and
`provenance/` (git diff, versions). wandb is imported only when used, and never blocks a run: without
credentials it writes offline (sync later with `wandb sync`), and an unreachable server falls back to offline.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import netrc
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lab.files import write_json
from lab.tracking import provenance as prov

log = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so the file stays valid and the problem stays visible."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def has_wandb_credentials() -> bool:
    """WANDB_API_KEY, or a netrc entry for the configured host (what `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_mode(mode: str) -> str:
    """`auto` defers to WANDB_MODE, then to whether credentials exist; an explicit mode wins over both."""
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE", "").lower()
    if env in ("online", "offline", "disabled"):
        return env
    if env in ("dryrun", "run"):  # wandb's legacy spellings
        return {"dryrun": "offline", "run": "online"}[env]
    return "online" if has_wandb_credentials() else "offline"


class Tracker:
    def __init__(
        self,
        run_dir: str | Path,
        *,
        logger_cfg: Any = None,
        job_type: str = "train",
        config: dict | None = None,
        name: str | None = None,
        group: str | None = None,
        tags: list[str] | tuple[str, ...] = (),
        rank: int = 0,
        provenance: dict | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.logger_cfg, self.job_type, self.config = logger_cfg, job_type, config or {}
        self.name, self.group, self.tags, self.rank = name, group, list(tags), rank
        self.provenance = provenance or {}
        self.wandb_run = None
        self._summary: dict[str, Any] = {}
        self._metrics_file = None
        self._started = 0.0

    @property
    def is_writer(self) -> bool:
        """Only rank 0 writes records: one run dir, one wandb run, however many processes."""
        return self.rank == 0

    def start(self) -> Tracker:
        self._started = time.monotonic()
        if not self.is_writer:
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Line-buffered, so `tail -f metrics.jsonl` shows each event as it happens; closed in finish().
        self._metrics_file = open(self.run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        self._write_provenance()
        if self.logger_cfg is not None and self.logger_cfg.name == "wandb":
            self.wandb_run = self._start_wandb()
            for name in ("git.diff", "env.json"):
                if (self.run_dir / "provenance" / name).is_file():
                    self.save_file(self.run_dir / "provenance" / name)
        return self

    def run_ref(self) -> dict[str, str | None]:
        """How other runs refer to this one: its run dir and wandb id/path (None without wandb)."""
        run = self.wandb_run
        return {
            "run_dir": str(self.run_dir),
            "wandb_id": run.id if run else None,
            "wandb_path": run.path if run else None,
        }

    @contextlib.contextmanager
    def session(self) -> Iterator[Tracker]:
        """start() ... finish(status): "completed", or the stopping exception's `run_status` ("failed" by
        default, "pruned" for a pruned sweep trial), so a crashed run is still recorded as such."""
        self.start()
        status = "failed"
        try:
            yield self
            status = "completed"
        except BaseException as err:
            status = getattr(err, "run_status", "failed")
            raise
        finally:
            self.finish(status)

    def log(self, metrics: dict[str, float], step: int, epoch: int | None = None) -> None:
        """One event: `step` = global optimizer step, `epoch` = 1-based epoch it belongs to."""
        if not self.is_writer:
            return
        record = {"step": step, "epoch": epoch, **{k: _plain(v) for k, v in metrics.items()}}
        self._metrics_file.write(json.dumps(record) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({**metrics, **({"epoch": epoch} if epoch is not None else {})}, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        self._summary.update({k: _plain(v) for k, v in values.items()})
        if self.wandb_run is not None:
            self.wandb_run.summary.update(values)

    def save_file(self, path: str | Path) -> None:
        """Attach a snapshot of a run-dir file (model summary, log, git diff) to the wandb run.

        A copy in the wandb run's files folder, uploaded at finish (or by `wandb sync`); a symlink would keep
        following a log that is still being written."""
        if self.wandb_run is not None:
            target = Path(self.wandb_run.dir) / Path(path).resolve().relative_to(self.run_dir.resolve())
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)

    def log_checkpoint(self, path: str | Path, alias: str) -> None:
        """Upload a checkpoint as a `model` artifact (offline runs keep it for `wandb sync`)."""
        if self.wandb_run is None or not Path(path).is_file():
            return
        import wandb

        artifact = wandb.Artifact(f"model-{self.wandb_run.id}", type="model", metadata={"file": Path(path).name})
        artifact.add_file(str(path))
        self.wandb_run.log_artifact(artifact, aliases=[alias, "latest"])

    def finish(self, status: str = "completed") -> None:
        if not self.is_writer:
            return
        summary = {
            **self._summary,
            "status": status,
            "elapsed_s": round(time.monotonic() - self._started, 3),
            "git_commit": self.provenance.get("git_commit"),
            "git_dirty": self.provenance.get("git_dirty"),
        }
        if self.wandb_run is not None:
            run = self.wandb_run
            summary.update(wandb_id=run.id, wandb_path=run.path, wandb_dir=str(Path(run.dir).parent))
            log_file = self.run_dir / f"{self.job_type}.log"
            if log_file.is_file():
                self.save_file(log_file)
            run.summary.update({"status": status})
            run.finish(exit_code=0 if status == "completed" else 1)
            self.wandb_run = None
        write_json(self.run_dir / "summary.json", summary)
        if self._metrics_file is not None:
            self._metrics_file.close()
            self._metrics_file = None

    # ------------------------------------------------------------------ internals
    def _write_provenance(self) -> None:
        folder = self.run_dir / "provenance"
        folder.mkdir(exist_ok=True)
        if self.provenance.get("git_commit"):
            (folder / "git.diff").write_text(prov.git_diff())
        write_json(folder / "env.json", self.provenance)

    def _start_wandb(self):
        import wandb

        cfg = self.logger_cfg
        mode = resolve_mode(cfg.mode)
        git = {k: self.provenance.get(k) for k in ("git_commit", "git_branch", "git_dirty")}
        settings = {"init_timeout": cfg.init_timeout, "console": "off", "silent": True}
        if git["git_commit"]:
            settings.update(git_root=str(prov.REPO_ROOT), git_commit=git["git_commit"])
        else:
            settings["disable_git"] = True
        kwargs = {
            "project": cfg.project or os.environ.get("WANDB_PROJECT") or "lab",
            "entity": cfg.entity,
            "dir": os.environ.get("WANDB_DIR") or str(self.run_dir),
            "name": self.name,
            "group": cfg.group or self.group,
            "job_type": self.job_type,
            "tags": [*self.tags, *cfg.tags],
            # git info in the config too, so it is a column of the runs table
            "config": {**self.config, "provenance": git},
            "reinit": "finish_previous",  # multirun: one run per job, never the previous job's
        }
        runs_root = Path(kwargs["dir"]) / "wandb"
        before = set(runs_root.glob("run-*"))
        try:
            run = wandb.init(mode=mode, settings=wandb.Settings(**settings), **kwargs)
        except Exception as err:  # no credentials, server unreachable within init_timeout, ...
            if mode != "online":
                raise
            for stale in set(runs_root.glob("run-*")) - before:  # the failed attempt's half-written run
                shutil.rmtree(stale, ignore_errors=True)
            log.warning(
                "wandb could not start online (%s); logging offline instead: sync later with `wandb sync`",
                str(err).splitlines()[0] if str(err) else type(err).__name__,
            )
            run = wandb.init(mode="offline", settings=wandb.Settings(**settings), **kwargs)
        log.info("wandb run %s (%s) in %s", run.id, mode if not run.offline else "offline", run.dir)
        return run


def job_identity(cfg: Any, run_dir: str | Path) -> dict[str, Any]:
    """Name, sweep group and overrides of the current Hydra job (computed where Hydra runs; spawned workers
    receive it ready-made): the name comes from the overrides, multirun jobs are grouped by sweep."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
    except ValueError:  # outside a Hydra job (tests, notebooks)
        return {"name": None, "group": None, "overrides": []}
    name = hydra_cfg.job.override_dirname or Path(run_dir).name
    group = None
    if hydra_cfg.mode == RunMode.MULTIRUN:
        group = f"{cfg.task_name}-{Path(hydra_cfg.sweep.dir).name}"
        name = f"{hydra_cfg.job.num}:{name}"
    return {"name": name, "group": group, "overrides": list(hydra_cfg.overrides.task)}


def from_config(
    cfg: Any,
    run_dir: str | Path,
    job_type: str,
    provenance: dict,
    rank: int = 0,
    identity: dict[str, Any] | None = None,
) -> Tracker:
    """A Tracker for a job: the resolved config plus the Hydra overrides, named and grouped by `job_identity`."""
    from omegaconf import OmegaConf

    identity = identity or job_identity(cfg, run_dir)
    config = {**OmegaConf.to_container(cfg, resolve=True), "hydra_overrides": identity["overrides"]}
    return Tracker(
        run_dir,
        logger_cfg=cfg.logger,
        job_type=job_type,
        config=config,
        name=identity["name"],
        group=identity["group"],
        tags=list(cfg.get("tags", [])),
        rank=rank,
        provenance=provenance,
    )
