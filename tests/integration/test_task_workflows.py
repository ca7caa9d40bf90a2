"""Regression and language modelling through all four scripts: train (one process and DDP), resume, sweep, eval,
export with parity, infer; and the mistakes on these paths end in one clear line."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import made_once, max_abs_diff, plugins_env, run_script

pytestmark = pytest.mark.slow

# deterministic and short: no dropout, constant LR (1 epoch + resume = 2 epochs), every step logged
COMMON = ["logger=none", "scheduler=constant", "scheduler.warmup_steps=0", "trainer.log_every_n_steps=1"]
TASKS = {
    "regression": ["experiment=diabetes_regression", "model.dropout=0", "data.batch_size=32"],
    "language_model": [
        "experiment=char_lm",
        "data.max_chars=12000",
        "data.block_size=32",
        "data.batch_size=16",
        "model.n_layer=1",
        "model.n_embd=32",
        "model.n_head=2",
        "model.dropout=0",
        "task.sample_tokens=20",
    ],
}


@dataclass
class Trained:
    task: str
    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    def metrics(self, name: str = "straight") -> list[dict]:
        return [json.loads(line) for line in (self.root / name / "metrics.jsonl").read_text().splitlines()]

    def weights(self, name: str) -> dict:
        return torch.load(self.root / name / "checkpoints/last.pt", weights_only=True)["model"]


def _run(script: str, run_dir: Path, *overrides: str, check: bool = True, env: dict[str, str] | None = None):
    if "-m" in overrides:  # the flag goes first; the sweep's jobs land in <run_dir>/<job>
        overrides = ("-m", f"hydra.sweep.dir={run_dir}", *(o for o in overrides if o != "-m"))
    else:
        overrides = (f"hydra.run.dir={run_dir}", *overrides)
    proc = run_script(script, *overrides, timeout=600, env=env)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _trained(task: str, shared_dir: Path) -> Trained:
    """2 epochs straight, keeping the checkpoint its first epoch ended with (a test callback), and a run resumed
    from that checkpoint to 2 epochs: the runs the tests below share, made once for the session's xdist workers."""
    root = shared_dir / f"task_workflows-{task}"

    def make() -> None:
        overrides = [*TASKS[task], *COMMON]
        keep = "+callbacks.keep_checkpoint={epoch: 1}"
        _run("train.py", root / "straight", *overrides, "trainer.max_epochs=2", keep, env=plugins_env())
        epoch1 = root / "straight/checkpoints/epoch1.pt"
        assert torch.load(epoch1, weights_only=True)["progress"]["epoch"] == 1  # what a 1-epoch run leaves
        _run("train.py", root / "resumed", *overrides, "trainer.max_epochs=2", f"ckpt_path={epoch1}")

    made_once(root, make)
    return Trained(task, root)


@pytest.fixture(scope="module", params=list(TASKS))
def trained(request, shared_dir) -> Trained:
    return _trained(request.param, shared_dir)


def test_resume_is_bitwise_and_the_task_metrics_are_logged(trained: Trained):
    straight, resumed = trained.weights("straight"), trained.weights("resumed")
    assert all(torch.equal(value, resumed[key]) for key, value in straight.items())
    names = {
        "regression": {"val/loss", "val/rmse", "val/mae", "val/r2", "val/rmse_best"},
        "language_model": {"val/loss", "val/perplexity", "val/token_acc", "val/loss_best"},
    }[trained.task]
    validation = [row for row in trained.metrics() if "val/loss" in row]
    assert len(validation) == 2 and names <= set(validation[-1])
    # learning: the monitored metric improved from the first epoch to the second
    monitor = "val/rmse" if trained.task == "regression" else "val/loss"
    assert validation[1][monitor] < validation[0][monitor]


# Each task under one strategy (test_distributed runs classification under both, each DDP launch costs a few
# seconds of start): fsdp for the LM, whose output projection reads the (root unit's) token embedding; ddp for the
# regression MLP, which shares no weight.
STRATEGY = {"regression": "ddp", "language_model": "fsdp"}


def test_two_ranks_of_b_match_one_process_of_2b(trained: Trained, tmp_path):
    # 12 steps: longer runs drift apart by float summation order alone (Adam amplifies it in rarely-seen rows)
    overrides = [*TASKS[trained.task], *COMMON, "trainer.max_steps=12"]
    batch = int(next(o for o in overrides if o.startswith("data.batch_size=")).split("=")[1])
    _run("train.py", tmp_path / "one", *overrides)
    runs = Trained(trained.task, tmp_path)
    one = [row["train/loss"] for row in runs.metrics("one") if "train/loss" in row]
    assert len(one) == 12
    strategy, half = STRATEGY[trained.task], f"data.batch_size={batch // 2}"
    _run("train.py", tmp_path / strategy, *overrides, f"dist={strategy}", "dist.nproc=2", half)
    assert max_abs_diff(runs.weights("one"), runs.weights(strategy)) <= 1e-5
    losses = [row["train/loss"] for row in runs.metrics(strategy) if "train/loss" in row]
    assert losses == pytest.approx(one, abs=1e-5)


def test_a_two_job_sweep_is_sorted_by_the_task_monitor(trained: Trained, tmp_path):
    overrides = [*TASKS[trained.task], *COMMON, "trainer.max_epochs=1", "optimizer.lr=0.001,0.003"]
    proc = _run("train.py", tmp_path, "-m", *overrides)
    monitor = "val/rmse_best" if trained.task == "regression" else "val/loss_best"
    assert f"sorted by {monitor}, minimize" in proc.stdout
    with (tmp_path / "sweep_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    values = [float(row[monitor]) for row in rows]
    assert len(rows) == 2 and values == sorted(values)


def test_eval_reproduces_validation_and_writes_the_task_artifact(trained: Trained, tmp_path):
    best = trained.path("straight/checkpoints/best.pt")
    _run("eval.py", tmp_path, f"ckpt_path={best}", "eval.split=val", "logger=none")
    report = json.loads((tmp_path / "eval.json").read_text())
    step = torch.load(best, weights_only=True)["progress"]["global_step"]
    logged = next(row for row in trained.metrics() if "val/loss" in row and row["step"] == step)
    assert report["task"] == trained.task
    for name, value in report["metrics"].items():
        assert value == pytest.approx(logged[f"val/{name}"], rel=1e-6), name
    artifact = {"regression": "predicted_vs_true.png", "language_model": "samples.txt"}[trained.task]
    assert (tmp_path / artifact).stat().st_size > 0


def _eager_outputs(best: Path, inputs: torch.Tensor) -> torch.Tensor:
    from lab.workflows import restore

    with torch.inference_mode():
        return restore.rebuild(best).model(inputs)


def test_export_parity_and_infer_from_every_backend(trained: Trained, tmp_path):
    best = trained.path("straight/checkpoints/best.pt")
    _run("export.py", tmp_path / "export", f"ckpt_path={best}", "export.formats=[onnx,pt2]", "logger=none")
    manifest = json.loads((tmp_path / "export/export_manifest.json").read_text())
    assert {a["status"] for a in manifest["artifacts"].values()} == {"ok"}
    assert all(a["parity"]["max_abs_diff"] <= 1e-4 for a in manifest["artifacts"].values() if "parity" in a)
    assert manifest["task"]["name"] == trained.task

    if trained.task == "regression":
        assert manifest["input"] == {"name": "input", "shape": ["batch", 10], "dtype": "float32"}
        assert manifest["artifacts"]["onnx"]["parity"]["top1_agreement"] is None
        from sklearn.datasets import load_diabetes

        diabetes = load_diabetes(scaled=False)
        np.save(tmp_path / "rows.npy", diabetes.data[:5])
        with (tmp_path / "rows.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([*diabetes.feature_names, "note"])  # extra columns are ignored
            writer.writerows([[*row, "x"] for row in diabetes.data[:5].tolist()])
        meta = torch.load(best, weights_only=True)["data_meta"]
        x = (torch.tensor(diabetes.data[:5]) - torch.tensor(meta["feature_mean"])) / torch.tensor(meta["feature_std"])
        expected = _eager_outputs(best, x.float()).flatten() * meta["target_std"] + meta["target_mean"]
        for model in (best, tmp_path / "export/model.onnx", tmp_path / "export/model.pt2"):
            for rows in ("rows.npy", "rows.csv"):
                out = tmp_path / f"infer-{model.name}-{rows}"
                _run("infer.py", out, f"ckpt_path={model}", f"input={tmp_path / rows}", "logger=none")
                with (out / "predictions.csv").open() as f:
                    predicted = [float(row["progression"]) for row in csv.DictReader(f)]
                assert predicted == pytest.approx(expected.tolist(), abs=1e-3)
    else:
        assert manifest["input"] == {"name": "input", "shape": ["batch", "sequence"], "dtype": "int64"}
        assert manifest["artifacts"]["onnx"]["parity"]["top1_agreement"] == 1.0
        texts = []
        for model in (best, best, tmp_path / "export/model.onnx"):
            out = tmp_path / f"infer-{len(texts)}"
            _run("infer.py", out, f"ckpt_path={model}", "prompt='def '", "infer.max_new_tokens=40", "logger=none")
            record = json.loads((out / "predictions.json").read_text())["predictions"][0]
            assert record["prompt"] == "def " and len(record["text"]) == 40
            texts.append(record["text"])
        assert texts[0] == texts[1]  # seeded sampling: the same continuation twice


@pytest.fixture(scope="module")
def tiny(shared_dir) -> dict[str, Path]:
    """A checkpoint of each task, for the mistakes below: the 2-epoch runs the tests above share."""
    return {task: _trained(task, shared_dir).path("straight/checkpoints/last.pt") for task in TASKS}


def _mistake(case: str, tmp_path: Path, request) -> list[str]:
    """The command line of one mistake."""
    if case == "classification_on_values":
        return ["train.py", "task=classification", "data=diabetes", "model=mlp"]
    if case == "csv_without_target":
        table = tmp_path / "table.csv"
        table.write_text("a,b,label\n" + "1,2,x\n3,4,y\n" * 10)
        return ["train.py", "task=regression", "data=csv", f"data.path={table}", "data.target=price", "model=mlp"]
    if case == "float_csv_as_classes":  # every distinct value would be a class of its own
        table = tmp_path / "table.csv"
        table.write_text("a,price\n" + "".join(f"{i},{i * 1.37:.2f}\n" for i in range(40)))
        return ["train.py", "task=classification", "data=csv", f"data.path={table}", "data.target=price", "model=mlp"]
    ckpts = request.getfixturevalue("tiny")
    if case == "npy_of_wrong_width":
        np.save(tmp_path / "bad.npy", np.zeros((3, 4)))
        return ["infer.py", f"ckpt_path={ckpts['regression']}", f"input={tmp_path / 'bad.npy'}"]
    if case == "image_to_regression":
        from PIL import Image

        Image.new("L", (8, 8)).save(tmp_path / "x.png")
        return ["infer.py", f"ckpt_path={ckpts['regression']}", f"input={tmp_path / 'x.png'}"]
    return ["infer.py", f"ckpt_path={ckpts['language_model']}", "prompt='def \u4e16\u754c'"]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("classification_on_values", "task=classification needs class labels"),
        ("csv_without_target", "data.target='price' is not a column"),
        ("float_csv_as_classes", "40 distinct values in 40 rows), not class labels; use task=regression"),
        ("npy_of_wrong_width", "the model takes rows of 10 features"),
        ("image_to_regression", "give a .csv with columns"),
        ("prompt_with_unknown_characters", "characters the model never saw"),
    ],
)
def test_mistakes_on_the_new_paths_end_in_one_clear_line(case, message, tmp_path, request):
    script, *overrides = _mistake(case, tmp_path, request)
    proc = _run(script, tmp_path / "run", *overrides, "logger=none", check=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and message in last, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
