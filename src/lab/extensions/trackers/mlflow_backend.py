"""MLflow: one MLflow run per job.

The run holds the resolved config as params, the git commit, branch and dirty flag as tags, the metrics (step is
the global optimizer step, plus `epoch`), the summary, and artifacts: attached run-dir files, `config.yaml` and
checkpoints.

It records to `logger.mlflow.tracking_uri`, else $MLFLOW_TRACKING_URI, else one SQLite database shared by every
run, `<paths.outputs>/mlflow/mlflow.db`, with artifacts beside it. So `mlflow ui --backend-store-uri
sqlite:///outputs/mlflow/mlflow.db` compares all runs. Since MLflow 3.13 the file store (`./mlruns`) is refused
unless MLFLOW_ALLOW_FILE_STORE=true, and MLflow itself defaults to SQLite.

:meth:`MlflowBackend.check` refuses, before anything is written, an unknown URI scheme, the file store without
MLFLOW_ALLOW_FILE_STORE, a server that does not answer within `logger.mlflow.timeout`, and a resume recorded in
another store. mlflow is imported only in the tracker's child process, since starting it takes a few seconds.

A resumed run continues its MLflow run, whose id is kept in `<run dir>/mlflow/run.json`. MLflow params are
immutable, so only missing keys are added. As in wandb, steps retrained after the checkpoint are not logged twice.
A new run in the dir (`overwrite=true`) starts a new MLflow run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

from lab.errors import UserError
from lab.files import write_json
from lab.tracking.backends import Backend, RunInfo, number, plain, writing

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "lab"  # the same as wandb's default project
RUN_FILE = "run.json"  # in <run dir>/mlflow/: {run_id, experiment_id, tracking_uri}
STATUSES = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED", "pruned": "KILLED"}
MAX_PER_BATCH = {"metrics": 1000, "params": 100, "tags": 100}  # log_batch's limits (mlflow.utils.validation)
MAX_PARAM_LENGTH = 6000  # longer param values are cut; config.yaml has them whole
_BAD_NAME = re.compile(r"[^/\w.\- :]")  # characters MLflow refuses in a metric or param name


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


# the URI schemes MLflow has tracking stores for; a database scheme may name a driver (postgresql+psycopg2)
MLFLOW_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def mlflow_uri_problem(uri: str) -> str | None:
    """Return why `uri` is not a usable MLflow tracking URI, or None if it is. A plain path is a file store."""
    scheme = uri.partition(":")[0].partition("+")[0].lower() if re.match(r"^[A-Za-z][\w+.-]*:", uri) else ""
    if len(scheme) == 1:  # a Windows drive letter (C:\\runs): a path
        scheme = ""
    if scheme and scheme not in MLFLOW_SCHEMES:
        return (
            f"{scheme}: is not a tracking URI scheme MLflow knows; use sqlite:///<path>/mlflow.db (a local store), "
            "http(s)://<host>:<port> (an MLflow server), postgresql|mysql|mssql://... (a database) or databricks"
        )
    if scheme in ("http", "https") and not urlparse(uri).hostname:
        return f"{uri} names no host; write it as {scheme}://<host>:<port>"
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        return "a SQLite URI has three slashes before its path: sqlite:///relative/mlflow.db, sqlite:////absolute.db"
    return None


def tracking_uri(run: RunInfo) -> tuple[str, str]:
    """Return (the store this run records into, where that came from: the key, the variable, or the default)."""
    settings = run.settings
    if settings is not None and settings.tracking_uri:
        return settings.tracking_uri, settings.key_of("tracking_uri")
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "$MLFLOW_TRACKING_URI"
    return f"sqlite:///{default_store(run) / 'mlflow.db'}", "the default store"


def default_store(run: RunInfo) -> Path:
    """Return `<paths.outputs>/mlflow`, absolute, where every run of this checkout records whatever its run dir."""
    outputs = (run.config.get("paths") or {}).get("outputs") or "outputs"
    return (Path(outputs) / "mlflow").resolve()


def experiment_name(run: RunInfo) -> str:
    settings = run.settings
    return (settings and settings.experiment) or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT


def _scheme(uri: str) -> str:
    """Return the scheme without a database driver (postgresql+psycopg2 -> postgresql), or '' for a plain path."""
    parsed = urlparse(uri).scheme.partition("+")[0].lower()
    return "" if len(parsed) <= 1 else parsed  # a Windows drive letter is a path


def _sqlite_path(uri: str) -> Path | None:
    """Return the database file of a sqlite:/// URI, or None for an in-memory one."""
    path = unquote(uri[len("sqlite:///") :]).partition("?")[0]
    return Path(path) if path and path != ":memory:" else None


def _fix_default() -> str:
    return "or leave logger.mlflow.tracking_uri and $MLFLOW_TRACKING_URI unset for the local store under outputs/"


def _server_answers(uri: str, timeout: float) -> str | None:
    """Return None if anything answers HTTP at `uri`, else why not. Any status counts: it may want credentials."""
    context = None
    if uri.startswith("https:"):
        if _truthy(os.environ.get("MLFLOW_TRACKING_INSECURE_TLS")):
            context = ssl._create_unverified_context()
        else:
            context = ssl.create_default_context(cafile=os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH") or None)
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout, context=context):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as err:
        return str(err.reason)
    except (OSError, ValueError) as err:  # a timeout, a malformed URL
        return str(err) or type(err).__name__


def read_run_file(run_dir: Path) -> dict[str, Any] | None:
    """Return the MLflow run a run dir recorded into, or None."""
    try:
        found = json.loads((run_dir / MlflowBackend.folder / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("run_id") else None


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten the config into MLflow params: keys joined by dots, values as JSON except strings, kept as they are."""
    params: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            params.update(flatten(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(plain(value))
            params[name] = text if len(text) <= MAX_PARAM_LENGTH else text[: MAX_PARAM_LENGTH - 3] + "..."
    return params


def mlflow_name(key: str) -> str:
    """Make a name MLflow accepts: refused characters become `_`, empty path parts are dropped."""
    name = _BAD_NAME.sub("_", key)
    name = re.sub(r"/{2,}", "/", name).strip("/")
    return "/".join(part if part not in (".", "..") else part.replace(".", "_") for part in name.split("/")) or "_"


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep MLflow's and alembic's INFO lines, and SQLAlchemy's warnings about MLflow's queries, out of the log.

    A new SQLite store alone prints dozens of migration lines."""
    import warnings

    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(mlflow|sqlalchemy|alembic)\b")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Create and migrate a local SQLite store one process at a time, since a sweep's parallel jobs start together."""
    path = _sqlite_path(uri) if _scheme(uri) == "sqlite" else None
    if path is None:
        yield
        return
    with writing(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 (closed below)
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


class MlflowBackend(Backend):
    name = "mlflow"
    folder = "mlflow"  # <run dir>/mlflow/run.json names the MLflow run this run dir records into
    slow_to_start = True  # the import and the store take a few seconds

    @classmethod
    def check(cls, run: RunInfo) -> None:
        uri, source = tracking_uri(run)
        problem = mlflow_uri_problem(uri)
        if problem is not None:
            raise UserError(f"{source}={uri!r}: {problem}; {_fix_default()}")
        scheme = _scheme(uri)
        if scheme in ("", "file") and not _truthy(os.environ.get("MLFLOW_ALLOW_FILE_STORE")):
            raise UserError(
                f"{source}={uri!r} is MLflow's file store, which MLflow (3.13 on) refuses unless "
                "MLFLOW_ALLOW_FILE_STORE=true: set that to use it, or record into SQLite "
                f"(sqlite:///<path>/mlflow.db), {_fix_default()}"
            )
        if scheme in ("http", "https"):
            why = _server_answers(uri, run.settings.timeout if run.settings is not None else 10.0)
            if why is not None:
                raise UserError(
                    f"{source}={uri!r}: no MLflow server answers there ({why}): start it (mlflow server --host "
                    f"<host> --port <port>), correct the URI, {_fix_default()}"
                )
        recorded = read_run_file(run.run_dir) if run.continuing else None
        if recorded is not None and recorded.get("tracking_uri") != uri:
            raise UserError(
                f"this run records into MLflow run {recorded['run_id']} in {recorded.get('tracking_uri')}, but "
                f"{source} is {uri}: continue it there with logger.mlflow.tracking_uri={recorded.get('tracking_uri')}"
            )

    def start(self) -> None:
        from mlflow import MlflowClient

        self.uri, _ = tracking_uri(self.run)
        with _store_lock(self.uri), _quiet():
            self.client = MlflowClient(tracking_uri=self.uri)
            self.experiment_id = self._experiment()
        self._summary: dict[str, Any] = {}
        self._last_step = 0
        self._names: set[str] = set()  # metrics logged in this record
        self.recorded: dict[str, int] = {}  # on resume: each metric's last step already recorded
        self._existing_params: set[str] = set()
        continued = read_run_file(self.run.run_dir) if self.run.continuing else None
        if continued is not None:
            self.run_id = continued["run_id"]
            self._continue()
        else:
            self.run_id = self._create()
        with writing(self.run.run_dir / self.folder):
            (self.run.run_dir / self.folder).mkdir(parents=True, exist_ok=True)
            ids = {"run_id": self.run_id, "experiment_id": self.experiment_id, "tracking_uri": self.uri}
            write_json(self.run.run_dir / self.folder / RUN_FILE, ids)
        self._record_config()
        log.info(
            "mlflow run %s (experiment %r%s) in %s",
            self.run_id,
            experiment_name(self.run),
            ", continued" if continued else "",
            self.uri,
        )

    def log(self, metrics: Mapping[str, Any], step: int, epoch: int | None) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        values = {mlflow_name(key): number(value) for key, value in metrics.items()}
        if epoch is not None:
            values["epoch"] = float(epoch)
        entries = [
            Metric(key, value, timestamp, step)
            for key, value in values.items()
            if value is not None and step > self.recorded.get(key, -1)  # a resume replays steps: log each once
        ]
        for chunk in _chunks(entries, MAX_PER_BATCH["metrics"]):
            self.client.log_batch(self.run_id, metrics=chunk)
        self._names.update(entry.key for entry in entries)
        self._last_step = max(self._last_step, step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self._summary.update(values)

    def save_file(self, path: Path) -> None:
        """Upload a run-dir file as an artifact at the same relative path, e.g. provenance/git.diff."""
        folder = Path(path).resolve().relative_to(self.run.run_dir.resolve()).parent
        self.client.log_artifact(self.run_id, str(path), folder.as_posix() if folder.parts else None)

    def log_checkpoint(self, path: Path, alias: str) -> None:
        """Upload a checkpoint as the artifact `checkpoints/<file name>`."""
        self.client.log_artifact(self.run_id, str(path), "checkpoints")

    def finish(self, status: str) -> dict[str, Any]:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        # summary numbers such as best_epoch become metrics, so they show as columns in the runs table
        extra = {mlflow_name(key): number(value) for key, value in self._summary.items()}
        step = self._last_step
        entries = [
            Metric(key, value, timestamp, step)
            for key, value in extra.items()
            if value is not None and key not in self._names and step > self.recorded.get(key, -1)
        ]
        for chunk in _chunks(entries, MAX_PER_BATCH["metrics"]):
            self.client.log_batch(self.run_id, metrics=chunk)
        self.client.log_dict(self.run_id, {**plain(self._summary), "status": status}, "summary.json")
        log_file = self.run.run_dir / f"{self.run.job_type}.log"
        if log_file.is_file():
            self.save_file(log_file)
        self.client.set_tag(self.run_id, "status", status)
        self.client.set_terminated(self.run_id, STATUSES.get(status, "FAILED"))
        return {"mlflow_run_id": self.run_id, "mlflow_tracking_uri": self.uri}

    def ref(self) -> dict[str, Any]:
        run_id = getattr(self, "run_id", None)
        return {"mlflow_run_id": run_id} if run_id else {}

    # ----------------------------------------------------------------------- the record
    def _experiment(self) -> str:
        from mlflow.exceptions import MlflowException

        name = experiment_name(self.run)
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise UserError(
                    f"MLflow experiment {name!r} in {self.uri} is deleted: restore it (mlflow experiments restore "
                    f"--experiment-id {found.experiment_id}) or choose another with logger.mlflow.experiment"
                )
            return str(found.experiment_id)
        location = None
        if _scheme(self.uri) == "sqlite" and (path := _sqlite_path(self.uri)) is not None:
            location = (path.parent.resolve() / "artifacts").as_uri()  # beside the database, not ./mlartifacts
        try:
            return str(self.client.create_experiment(name, artifact_location=location))
        except MlflowException:  # another job created it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)

    def _tags(self) -> dict[str, str]:
        run, git = self.run, self.run.git
        tags = {
            "job_type": run.job_type,
            "run_dir": str(run.run_dir.resolve()),
            "git_dirty": json.dumps(git["git_dirty"]),
        }
        if git["git_commit"]:
            tags.update({"mlflow.source.git.commit": git["git_commit"], "git_commit": git["git_commit"]})
        if git["git_branch"]:
            tags.update({"mlflow.source.git.branch": git["git_branch"], "git_branch": git["git_branch"]})
        if run.group:
            tags["group"] = run.group
        if run.tags:
            tags["tags"] = ", ".join(run.tags)
        return tags

    def _create(self) -> str:
        created = self.client.create_run(
            self.experiment_id, run_name=self.run.name or self.run.run_dir.name, tags=self._tags()
        )
        return str(created.info.run_id)

    def _continue(self) -> None:
        """Reopen the recorded run, noting its params and each metric's last step so nothing is logged twice."""
        from mlflow.exceptions import MlflowException

        try:
            found = self.client.get_run(self.run_id)
        except MlflowException as err:
            raise UserError(
                f"MLflow run {self.run_id} of {self.run.run_dir} is not in {self.uri} ({err.error_code}): remove "
                f"{self.run.run_dir / self.folder / RUN_FILE} to record the rest of the run as a new MLflow run"
            ) from err
        self.client.update_run(self.run_id, status="RUNNING")
        self.client.log_batch(
            self.run_id, tags=self._tag_list({**self._tags(), "resumed_at_step": str(self.run.resumed_step)})
        )
        for key in found.data.metrics:
            history = self.client.get_metric_history(self.run_id, key)
            self.recorded[key] = max((metric.step for metric in history), default=-1)
        self._existing_params = set(found.data.params)

    def _record_config(self) -> None:
        """Record the config as params and as config.yaml; MLflow keeps a param's first value, so add only new keys."""
        from mlflow.entities import Param

        config = {**plain(self.run.config), "provenance": plain(self.run.git)}
        named: dict[str, str] = {}
        for key, value in flatten(config).items():
            named.setdefault(mlflow_name(key), value)  # keys that differ only in refused characters: first wins
        params = [Param(key, value) for key, value in named.items() if key not in self._existing_params]
        for chunk in _chunks(params, MAX_PER_BATCH["params"]):
            self.client.log_batch(self.run_id, params=chunk)
        self.client.log_text(self.run_id, yaml.safe_dump(config, sort_keys=False), "config.yaml")

    @staticmethod
    def _tag_list(tags: Mapping[str, str]) -> list[Any]:
        from mlflow.entities import RunTag

        return [RunTag(key, value) for key, value in tags.items()]
