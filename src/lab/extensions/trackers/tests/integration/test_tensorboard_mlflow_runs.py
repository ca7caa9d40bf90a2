"""The page's `python scripts/train.py logger=mlflow` through the real CLI, with TensorBoard turned on beside it
(`logger.backends.tensorboard=true`), and resumed: MLflow's client reads one MLflow run, continued, from the store
the page's `mlflow ui --backend-store-uri sqlite:///outputs/mlflow/mlflow.db` shows (here in the test's own
outputs/); TensorBoard's event reader reads both attempts' event files as one run. Each is compared with the run
dir's metrics.jsonl and resolved config. And a core install (`make install EXTRAS=`) refusing `logger=mlflow`,
naming the extra, before anything is written."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import REPO, run_script, script_env

pytestmark = pytest.mark.slow


def _same(series: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """Same steps, same values (to float32: TensorBoard keeps scalars as float32)."""
    steps, values = zip(*series) if series else ((), ())
    return list(steps) == [s for s, _ in expected] and list(values) == pytest.approx([v for _, v in expected])


@pytest.mark.filterwarnings("ignore::DeprecationWarning:sqlalchemy.*")  # SQLAlchemy 2.1 on MLflow's store, read here
def test_train_records_to_mlflow_and_tensorboard_and_a_resume_continues_both(tmp_path):
    env = {key: value for key, value in script_env().items() if not key.startswith("MLFLOW_")}
    run_dir, outputs = tmp_path / "run", tmp_path / "outputs"
    command = ["logger=mlflow", "logger.backends.tensorboard=true"]
    overrides = ["debug=fast", "model=mlp", *command, f"paths.outputs={outputs}"]  # the store: outputs/mlflow
    first = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    first_id = json.loads((run_dir / "summary.json").read_text())["mlflow_run_id"]
    resumed = run_script("train.py", *overrides, "trainer.max_epochs=2", f"resume={run_dir}", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    summary = json.loads((run_dir / "summary.json").read_text())
    local = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["train/loss"]) for r in local if "train/loss" in r]
    val_acc = [(r["step"], r["val/acc"]) for r in local if "val/acc" in r]
    resolved = OmegaConf.to_container(OmegaConf.load(run_dir / ".hydra/config.yaml"), resolve=True)
    assert len(losses) == 6 and len(val_acc) == 2  # both epochs

    # mlflow: the default store, read by MLflow
    client = MlflowClient(f"sqlite:///{outputs / 'mlflow' / 'mlflow.db'}")
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

    assert _same(history("train/loss"), losses) and _same(history("val/acc"), val_acc)  # each step once
    assert record.data.metrics["test/acc"] == pytest.approx(summary["test/acc"])

    # provenance: the config (params, config.yaml), the commit and dirty flag, the run dir's files as artifacts
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

    # tensorboard: its own event reader, both attempts' event files in the folder read as one run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert _same([(e.step, e.value) for e in events.Scalars("train/loss")], losses)
    assert _same([(e.step, e.value) for e in events.Scalars("val/acc")], val_acc)
    assert "test/acc" in events.Tags()["scalars"] and summary["tensorboard_dir"] == str(run_dir / "tensorboard")
    text = events.Tensors("config/text_summary")[-1]  # each attempt writes its config: the resumed one's last
    config = yaml.safe_load(textwrap.dedent(text.tensor_proto.string_val[0].decode()))
    git = {key: summary[key] for key in ("git_commit", "git_dirty")}
    assert {k: config["provenance"][k] for k in git} == git and config["model"] == resolved["model"]


def test_a_core_install_refuses_these_trackers_naming_the_extra(core_python: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(core_python), str(REPO / "scripts" / "train.py"), "logger=mlflow", f"hydra.run.dir={tmp_path}/run"],
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "logger=mlflow needs mlflow-skinny" in line and "make install EXTRAS=trackers" in line, line
    assert "-e '.[trackers]'" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir
