"""The MLflow tracker (mlflow_backend), read back with MLflow's own client: the config as params, the git
commit as tags, metrics at their steps, artifacts, the summary and the status; a resume continuing the same MLflow
run (its id in <run dir>/mlflow/run.json) without a step twice; a new run in the dir, a new MLflow run; where the
store is (the key, $MLFLOW_TRACKING_URI, the shared SQLite default); bad input refused before anything is written."""

from __future__ import annotations

import http.server
import json
import threading
import warnings
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from omegaconf import OmegaConf

from lab.config import validate
from lab.config.trackers import logger_config
from lab.errors import ConfigError, UserError
from lab.extensions.trackers.mlflow_backend import MlflowBackend, flatten, mlflow_name, tracking_uri
from lab.extensions.trackers.options import MlflowConfig
from lab.tracking import Tracker, child_process
from lab.tracking.backends import RunInfo
from lab.tracking.options import WandbConfig
from wandb_reader import find_run_files, read_run

# SQLAlchemy 2.1 deprecates a loader option MLflow's store uses (MLflow's matter; the backend silences it itself)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:sqlalchemy.*")

CONFIG = {"model": {"name": "mlp", "hidden_dims": [8, 4]}, "optimizer": {"lr": 0.1}, "paths": {"outputs": "o"}}
GIT = {"git_commit": "0123abc", "git_branch": "main", "git_dirty": True}


@pytest.fixture(autouse=True)
def no_mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One store for the module's tests (a new SQLite store is a second of schema migrations), an experiment each."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def _run(run_dir: Path, uri: str | None, experiment: str = "lab", **values: object) -> RunInfo:
    settings = MlflowConfig(tracking_uri=uri, experiment=experiment)
    fields: dict = {"config": CONFIG, "provenance": GIT, "name": "lr=0.1", "settings": settings}
    return RunInfo(run_dir=run_dir, **{**fields, **values})  # type: ignore[arg-type]


def _record(run: RunInfo, events: list[tuple[dict, int, int | None]], status: str = "completed") -> dict:
    backend = MlflowBackend(run)
    MlflowBackend.check(run)
    backend.start()
    for metrics, step, epoch in events:
        backend.log(metrics, step, epoch)
    backend.summary({"val/acc_best": 0.5, "best_epoch": 1, "note": "text"})
    return backend.finish(status)


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_mlflow_records_config_git_metrics_artifacts_summary_and_status(tmp_path, uri):
    run_dir = tmp_path / "run"
    (run_dir / "provenance").mkdir(parents=True)
    (run_dir / "provenance" / "git.diff").write_text("diff --git a/x b/x\n")
    (run_dir / "train.log").write_text("a log line\n")
    run = _run(run_dir, uri, group="sweep-1", tags=["baseline"])
    backend = MlflowBackend(run)
    backend.start()
    backend.log({"train/loss": 2.0, "train/lr": 0.1}, 1, 1)
    backend.log({"train/loss": 1.5, "odd name (x)": 3.0}, 2, 1)
    backend.log({"val/acc": 0.5, "val/note": "not a number"}, 2, 1)
    backend.log({"train/loss": float("nan")}, 3, 2)
    backend.save_file(run_dir / "provenance" / "git.diff")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "best.pt").write_bytes(b"weights")
    backend.log_checkpoint(run_dir / "checkpoints" / "best.pt", "best")
    backend.summary({"val/acc_best": 0.5, "best_epoch": 1})
    ref = backend.ref()
    written = backend.finish("completed")

    ids = json.loads((run_dir / "mlflow" / "run.json").read_text())
    assert written == {"mlflow_run_id": ids["run_id"], "mlflow_tracking_uri": uri} and ref == {
        "mlflow_run_id": ids["run_id"]
    }
    client = MlflowClient(uri)
    record = client.get_run(ids["run_id"])
    assert record.info.status == "FINISHED" and record.info.run_name == "lr=0.1"
    assert client.get_experiment(record.info.experiment_id).name == "lab"
    params = record.data.params
    assert params["model.hidden_dims"] == "[8, 4]" and params["optimizer.lr"] == "0.1" and params["model.name"] == "mlp"
    assert params["provenance.git_commit"] == "0123abc" and params["provenance.git_dirty"] == "true"
    tags = record.data.tags
    assert (
        tags["mlflow.source.git.commit"] == "0123abc" and tags["git_branch"] == "main" and tags["git_dirty"] == "true"
    )
    assert tags["group"] == "sweep-1" and tags["tags"] == "baseline" and tags["run_dir"] == str(run_dir.resolve())
    assert tags["status"] == "completed" and tags["job_type"] == "train"
    assert _history(client, ids["run_id"], "train/loss")[:2] == [(1, 2.0), (2, 1.5)]
    assert str(_history(client, ids["run_id"], "train/loss")[2][1]) == "nan"
    assert _history(client, ids["run_id"], "val/acc") == [(2, 0.5)] and "val/note" not in record.data.metrics
    assert _history(client, ids["run_id"], "epoch") == [(1, 1.0), (2, 1.0), (2, 1.0), (3, 2.0)]
    assert _history(client, ids["run_id"], "odd name _x_") == [(2, 3.0)]
    assert _history(client, ids["run_id"], "best_epoch") == [(3, 1.0)]  # the summary's numbers, at the last step

    def artifacts(path: str | None = None) -> set[str]:
        return {a.path for a in client.list_artifacts(ids["run_id"], path)}

    assert artifacts() >= {"config.yaml", "summary.json", "train.log", "provenance", "checkpoints"}
    assert artifacts("provenance") == {"provenance/git.diff"} and artifacts("checkpoints") == {"checkpoints/best.pt"}
    config = client.download_artifacts(ids["run_id"], "config.yaml", str(tmp_path))
    assert yaml.safe_load(Path(config).read_text()) == {**CONFIG, "provenance": GIT}
    summary = client.download_artifacts(ids["run_id"], "summary.json", str(tmp_path))
    assert json.loads(Path(summary).read_text()) == {"val/acc_best": 0.5, "best_epoch": 1, "status": "completed"}
    store = Path(uri.removeprefix("sqlite:///")).parent
    assert record.info.artifact_uri.startswith((store / "artifacts").as_uri())


def test_a_resume_continues_the_same_mlflow_run_and_logs_no_step_twice(tmp_path, uri):
    run_dir = tmp_path / "run"
    run = _run(run_dir, uri, "resumed")
    first = _record(run, [({"train/loss": 3.0}, 1, 1), ({"train/loss": 2.0}, 2, 1)], "interrupted")
    client = MlflowClient(uri)
    assert client.get_run(first["mlflow_run_id"]).info.status == "KILLED"

    # resumed from the checkpoint at step 1: step 2 is trained again; the resumed config has a key more
    resumed = _run(run_dir, uri, "resumed", continuing=True, resumed_step=1, config={**CONFIG, "ckpt_path": "last.pt"})
    second = _record(resumed, [({"train/loss": 2.5}, 2, 1), ({"train/loss": 1.0}, 3, 2)])
    assert second["mlflow_run_id"] == first["mlflow_run_id"]
    experiment = client.get_experiment_by_name("resumed")
    (record,) = client.search_runs([experiment.experiment_id])  # one record, not two
    assert record.info.run_id == first["mlflow_run_id"] and record.info.status == "FINISHED"
    assert _history(client, record.info.run_id, "train/loss") == [(1, 3.0), (2, 2.0), (3, 1.0)]
    assert record.data.params["ckpt_path"] == "last.pt" and record.data.params["model.name"] == "mlp"
    assert record.data.tags["resumed_at_step"] == "1"

    # a new run in the same dir (overwrite=true): a new MLflow run, and the run dir names it
    third = _record(_run(run_dir, uri, "resumed"), [({"train/loss": 9.0}, 1, 1)])
    assert third["mlflow_run_id"] != first["mlflow_run_id"]
    assert json.loads((run_dir / "mlflow/run.json").read_text())["run_id"] == third["mlflow_run_id"]
    assert len(client.search_runs([experiment.experiment_id])) == 2


def test_each_sweep_job_is_its_own_mlflow_run_in_the_experiment_named(tmp_path, uri):
    for job in ("0", "1"):
        _record(_run(tmp_path / job, uri, "mine", group="g"), [({"a": 1}, 1, 1)])
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("mine")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    assert [r.data.tags["run_dir"] for r in runs] == [str(tmp_path / "0"), str(tmp_path / "1")]
    assert {r.data.tags["group"] for r in runs} == {"g"}


def test_the_store_is_the_key_else_the_variable_else_one_sqlite_database_under_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = RunInfo(run_dir=tmp_path / "run", config={"paths": {"outputs": "out"}}, settings=MlflowConfig())
    assert tracking_uri(run) == (f"sqlite:///{tmp_path / 'out/mlflow/mlflow.db'}", "the default store")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracking_uri(run) == ("http://mlflow.example:5000", "$MLFLOW_TRACKING_URI")
    run.settings = MlflowConfig(tracking_uri="sqlite:///here.db")
    assert tracking_uri(run) == ("sqlite:///here.db", "logger.mlflow.tracking_uri")


def test_the_default_store_is_made_where_paths_outputs_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _record(_run(tmp_path / "run", None), [({"a": 1}, 1, 1)])
    store = tmp_path / "o" / "mlflow"
    (record,) = MlflowClient(f"sqlite:///{store / 'mlflow.db'}").search_runs(["1"])
    assert record.info.artifact_uri.startswith((store / "artifacts").as_uri())


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("htp://localhost:5000", r"logger\.mlflow\.tracking_uri='htp://localhost:5000': htp: is not a tracking URI"),
        ("sqlite://x.db", r"three slashes"),
        ("http://", r"names no host"),
    ],
)
def test_a_bad_uri_in_the_key_is_a_config_error(compose, uri, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose(["logger=mlflow", f"logger.mlflow.tracking_uri={uri}"]))
    validate(compose(["logger=[wandb,mlflow]", "logger.mlflow.experiment=mine", "logger.mlflow.timeout=2"]))


def _logger(**settings: object) -> object:
    return OmegaConf.structured(
        logger_config(backends={"mlflow": True, "csv": True}, mlflow=MlflowConfig(**settings), child_process=False)  # type: ignore[arg-type]
    )


def _refused(run_dir: Path, message: str, **settings: object) -> None:
    with pytest.raises(UserError, match=message) as raised:
        Tracker(run_dir, logger_cfg=_logger(**settings), config=CONFIG).start()
    assert "\n" not in str(raised.value)


def test_bad_input_is_one_line_naming_the_fix_before_anything_is_written(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://x")
    _refused(run_dir, r"^\$MLFLOW_TRACKING_URI='bogus://x': bogus: is not a tracking URI scheme MLflow knows; use sql")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    # nothing listens on port 9 (discard): the connection is refused at once
    _refused(
        run_dir,
        r"'http://127\.0\.0\.1:9': no MLflow server answers there \(.*\): start it",
        tracking_uri="http://127.0.0.1:9",
    )
    _refused(
        run_dir, r"is MLflow's file store, which .* MLFLOW_ALLOW_FILE_STORE=true", tracking_uri=str(tmp_path / "mlruns")
    )
    _refused(run_dir, r"file store", tracking_uri=(tmp_path / "mlruns").as_uri())
    assert not run_dir.exists() and not (tmp_path / "mlruns").exists() and not (tmp_path / "o").exists()


def test_a_resume_into_another_store_is_refused(tmp_path, uri):
    run_dir = tmp_path / "run"
    _record(_run(run_dir, uri), [({"a": 1}, 1, 1)])
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with pytest.raises(UserError, match=rf"records into MLflow run \w+ in {uri}, but .* continue it there with"):
        MlflowBackend.check(_run(run_dir, other, continuing=True))
    MlflowBackend.check(_run(run_dir, other))  # a new run in the dir may record anywhere


def test_a_server_that_answers_passes_the_check(tmp_path):
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        MlflowBackend.check(_run(tmp_path, f"http://127.0.0.1:{server.server_port}"))
    finally:
        server.shutdown()


def test_the_file_store_records_without_warnings_when_mlflow_allows_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (tmp_path / "mlruns").as_uri()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        written = _record(_run(tmp_path / "run", store), [({"train/loss": 1.0}, 1, 1)])
    assert [str(w.message) for w in caught if "mlflow" in w.filename] == []
    assert _history(MlflowClient(store), written["mlflow_run_id"], "train/loss") == [(1, 1.0)]


def test_params_and_metric_names_as_mlflow_takes_them():
    assert flatten({"a": {"b": [1, 2], "c": None, "d": {}}, "s": "text", "t": True}) == {
        "a.b": "[1, 2]",
        "a.c": "null",
        "a.d": "{}",
        "s": "text",
        "t": "true",
    }
    assert len(flatten({"long": "x" * 7000})["long"]) == 6000
    assert mlflow_name("val/per_class_acc/T-shirt (top)") == "val/per_class_acc/T-shirt _top_"
    assert mlflow_name("a//b/../c/") == "a/b/__/c"


@pytest.mark.integration  # starts the tracker's child process (wandb and mlflow in it) and wandb's
def test_wandb_and_mlflow_share_the_child_process_each_its_own_record(tmp_path, uri, monkeypatch):
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    logger = OmegaConf.structured(
        logger_config(
            backends={"wandb": True, "mlflow": True},
            wandb=WandbConfig(mode="offline"),
            mlflow=MlflowConfig(tracking_uri=uri),
        )
    )
    provenance = {**GIT, "git_commit": None}  # no git diff
    with Tracker(tmp_path / "run", logger_cfg=logger, config=CONFIG, provenance=provenance).session() as tracker:
        assert [type(b).__name__ for b in tracker.backends] == ["ChildProcessBackend", "ChildProcessBackend"]
        for step in (1, 2, 3):
            tracker.log({"train/loss": 1.0 / step}, step=step)
        ref = tracker.run_ref()
    child_process.close()
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert ref["mlflow_run_id"] == summary["mlflow_run_id"] and ref["wandb_id"] == summary["wandb_id"]
    expected = [(step, 1.0 / step) for step in (1, 2, 3)]
    assert _history(MlflowClient(uri), summary["mlflow_run_id"], "train/loss") == expected
    (run_file,) = find_run_files(tmp_path / "run" / "wandb")
    assert [(r["_step"], r["train/loss"]) for r in read_run(run_file).history] == expected
