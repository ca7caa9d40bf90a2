"""`logger=[wandb,tensorboard,csv]` through the real CLI: one short training run, each tracker read back with its
own library and compared with the run dir's metrics.jsonl and resolved config; `logger=mlflow` read back with
MLflow's client, and a resume continuing its MLflow run."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import run_script, script_env
from wandb_reader import find_run_files, read_run

pytestmark = pytest.mark.slow


def _same(series: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """Same steps, same values (to float32: TensorBoard keeps scalars as float32)."""
    steps, values = zip(*series) if series else ((), ())
    return list(steps) == [s for s, _ in expected] and list(values) == pytest.approx([v for _, v in expected])


def test_train_writes_every_chosen_tracker(tmp_path, monkeypatch):
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # no credentials: wandb writes offline
    run_dir = tmp_path / "run"
    overrides = ["debug=fast", "model=mlp", "trainer.max_epochs=2", "logger=[wandb,tensorboard,csv]"]
    proc = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]

    local = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["train/loss"]) for r in local if "train/loss" in r]
    val_acc = [(r["step"], r["val/acc"]) for r in local if "val/acc" in r]
    assert len(losses) >= 4 and len(val_acc) == 2
    summary = json.loads((run_dir / "summary.json").read_text())
    resolved = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra/config.yaml"), resolve=True)
    git = {key: summary[key] for key in ("git_commit", "git_dirty")}

    # wandb: the offline run file
    run = read_run(find_run_files(run_dir / "wandb")[0])
    assert _same([(r["_step"], r["train/loss"]) for r in run.history if "train/loss" in r], losses)
    assert run.run_id == summary["wandb_id"] and run.config["optimizer"] == resolved["optimizer"]

    # tensorboard: its own event reader
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert _same([(e.step, e.value) for e in events.Scalars("train/loss")], losses)
    assert _same([(e.step, e.value) for e in events.Scalars("val/acc")], val_acc)
    assert "test/acc" in events.Tags()["scalars"]
    (text,) = events.Tensors("config/text_summary")
    config = yaml.safe_load(textwrap.dedent(text.tensor_proto.string_val[0].decode()))
    assert {k: config["provenance"][k] for k in git} == git and config["model"] == resolved["model"]

    # csv: the csv module, and config.yaml
    with open(run_dir / "csv/metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(local)
    assert _same([(int(r["step"]), float(r["train/loss"])) for r in rows if r["train/loss"]], losses)
    assert _same([(int(r["step"]), float(r["val/acc"])) for r in rows if r["val/acc"]], val_acc)
    config = yaml.safe_load((run_dir / "csv/config.yaml").read_text())
    assert config.pop("hydra_overrides") == overrides
    provenance = config.pop("provenance")
    assert {k: provenance[k] for k in git} == git
    assert config == resolved


@pytest.mark.filterwarnings("ignore::DeprecationWarning:sqlalchemy.*")  # SQLAlchemy 2.1 on MLflow's store, read here
def test_train_records_to_mlflow_and_a_resume_continues_the_same_mlflow_run(tmp_path):
    env = {key: value for key, value in script_env().items() if not key.startswith("MLFLOW_")}
    run_dir, outputs = tmp_path / "run", tmp_path / "outputs"
    overrides = ["debug=fast", "model=mlp", "logger=mlflow", f"paths.outputs={outputs}"]  # the store: outputs/mlflow
    first = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    first_id = json.loads((run_dir / "summary.json").read_text())["mlflow_run_id"]
    resumed = run_script("train.py", *overrides, "trainer.max_epochs=2", f"resume={run_dir}", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    summary = json.loads((run_dir / "summary.json").read_text())
    local = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    client = MlflowClient(f"sqlite:///{outputs / 'mlflow' / 'mlflow.db'}")  # the default store, read by MLflow
    (record,) = client.search_runs([client.get_experiment_by_name("lab").experiment_id])  # one run, continued
    run_id = record.info.run_id
    assert (
        run_id
        == first_id
        == summary["mlflow_run_id"]
        == json.loads((run_dir / "mlflow/run.json").read_text())["run_id"]
    )
    assert record.info.status == "FINISHED" and record.data.tags["run_dir"] == str(run_dir)

    def history(key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))

    losses = [(r["step"], r["train/loss"]) for r in local if "train/loss" in r]
    assert len(losses) == 6 and _same(history("train/loss"), losses)  # both epochs, each step once
    assert _same(history("val/acc"), [(r["step"], r["val/acc"]) for r in local if "val/acc" in r])
    assert record.data.metrics["test/acc"] == pytest.approx(summary["test/acc"])

    # provenance: the config (params, config.yaml), the commit and dirty flag, the run dir's files as artifacts
    resolved = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra/config.yaml"), resolve=True)
    params = record.data.params
    assert params["optimizer.lr"] == str(resolved["optimizer"]["lr"]) and params["model.name"] == "mlp"
    assert record.data.tags["mlflow.source.git.commit"] == summary["git_commit"]
    assert record.data.tags["git_dirty"] == json.dumps(summary["git_dirty"])
    config = yaml.safe_load(Path(client.download_artifacts(run_id, "config.yaml", str(tmp_path))).read_text())
    assert config["model"] == resolved["model"] and config["provenance"]["git_commit"] == summary["git_commit"]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "summary.json", "train.log", "model_summary.txt", "provenance"} <= artifacts
    assert {"provenance/env.json", "provenance/attempt-2"} <= {
        a.path for a in client.list_artifacts(run_id, "provenance")
    }
