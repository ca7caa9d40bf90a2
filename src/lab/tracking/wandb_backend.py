"""Record each job as one Weights & Biases run (step = the global optimizer step).

wandb is imported only when this backend starts, and never blocks a run: without credentials it writes offline, and
a server that does not answer within `logger.wandb.init_timeout` falls back to offline with one warning.
"""

from __future__ import annotations

import logging
import netrc
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lab.tracking import provenance as prov
from lab.tracking.backends import Backend

log = logging.getLogger(__name__)

DEFAULT_PROJECT = "lab"  # unless logger.wandb.project or $WANDB_PROJECT says otherwise


def has_wandb_credentials() -> bool:
    """Whether WANDB_API_KEY is set, or netrc has an entry for the host (as `wandb login` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_mode(mode: str) -> str:
    """Resolve `auto` from WANDB_MODE, then from whether credentials exist. An explicit mode wins over both."""
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE", "").lower()
    env = {"dryrun": "offline", "run": "online"}.get(env, env)  # wandb's legacy spellings
    if env in ("online", "offline", "disabled"):
        return env
    return "online" if has_wandb_credentials() else "offline"


class WandbBackend(Backend):
    name = "wandb"
    keeps_histograms = True
    slow_to_start = True  # import and init take about 1 s of Python
    wandb_run: Any = None

    def start(self) -> None:  # the Tracker then attaches the provenance files (save_file)
        import wandb

        cfg, run = self.run.settings, self.run
        mode = resolve_mode(cfg.mode)
        git = run.git
        settings = {"init_timeout": cfg.init_timeout, "console": "off", "silent": True}
        if git["git_commit"]:
            settings.update(git_root=str(prov.REPO_ROOT), git_commit=git["git_commit"])
        else:
            settings["disable_git"] = True
        kwargs = {
            "project": cfg.project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            "entity": cfg.entity,
            "dir": os.environ.get("WANDB_DIR") or str(run.run_dir),
            "name": run.name,
            "group": cfg.group or run.group,
            "job_type": run.job_type,
            "tags": [*run.tags, *cfg.tags],
            # git info in the config too, so it is a column in the runs table
            "config": {**run.config, "provenance": git},
            "reinit": "finish_previous",  # in a multirun, one run per job, never the previous job's
        }
        if run.resume_id:
            kwargs.update(id=run.resume_id, resume="allow")  # continue the same wandb run, or make it if unknown
        runs_root = Path(kwargs["dir"]) / "wandb"
        before = set(runs_root.glob("run-*"))
        try:
            # mode is a checked config value; wandb types it as a Literal
            wandb_run = wandb.init(mode=mode, settings=wandb.Settings(**settings), **kwargs)  # type: ignore[arg-type]
        except Exception as err:  # no credentials, no answer within init_timeout, ...
            if mode != "online":
                raise
            for stale in set(runs_root.glob("run-*")) - before:  # the failed attempt's half-written run
                shutil.rmtree(stale, ignore_errors=True)
            log.warning(
                "wandb could not start online (%s); logging offline instead: sync later with `wandb sync`",
                str(err).splitlines()[0] if str(err) else type(err).__name__,
            )
            wandb_run = wandb.init(mode="offline", settings=wandb.Settings(**settings), **kwargs)
        log.info(
            "wandb run %s (%s%s) in %s",
            wandb_run.id,
            mode if not wandb_run.offline else "offline",
            ", resumed" if run.resume_id else "",
            wandb_run.dir,
        )
        self.wandb_run = wandb_run

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        self.wandb_run.log({**metrics, **({"epoch": epoch} if epoch is not None else {})}, step=step)

    def log_histograms(self, histograms: Mapping[str, tuple[list[float], list[float]]], step: int) -> None:
        import wandb

        # wandb types np_histogram as arrays but takes lists too; it calls tolist() only on what has it
        histogram = {key: wandb.Histogram(np_histogram=hist) for key, hist in histograms.items()}  # type: ignore[arg-type]
        self.wandb_run.log(histogram, step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self.wandb_run.summary.update(dict(values))

    def save_file(self, path: Path) -> None:
        """Copy a run-dir file into wandb's files folder to upload; a symlink would follow a log still being written."""
        target = Path(self.wandb_run.dir) / Path(path).resolve().relative_to(self.run.run_dir.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)

    def log_checkpoint(self, path: Path, alias: str) -> None:
        """Upload a checkpoint as a `model` artifact. Offline runs keep it for `wandb sync`."""
        import wandb

        artifact = wandb.Artifact(f"model-{self.wandb_run.id}", type="model", metadata={"file": Path(path).name})
        artifact.add_file(str(path))
        self.wandb_run.log_artifact(artifact, aliases=[alias, "latest"])

    def finish(self, status: str) -> dict[str, Any]:
        run = self.wandb_run
        ref = {"wandb_id": run.id, "wandb_path": run.path, "wandb_dir": str(Path(run.dir).parent)}
        log_file = self.run.run_dir / f"{self.run.job_type}.log"
        if log_file.is_file():
            self.save_file(log_file)
        run.summary.update({"status": status})
        run.finish(exit_code=0 if status == "completed" else 1)
        return ref

    def ref(self) -> dict[str, Any]:
        run = self.wandb_run
        return {"wandb_id": run.id, "wandb_path": run.path} if run is not None else {}
