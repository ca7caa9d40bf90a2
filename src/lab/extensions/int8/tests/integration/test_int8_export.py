"""INT8 through the real scripts: a trained CNN exported with both variants (published beside model.onnx, scored against
fp32, one recommended, the table in the log, the files run by onnxruntime), static INT8 for the regression and
language-model tasks with their own monitors, and an export with nothing to quantize refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import Run, made_once, run_script

pytestmark = pytest.mark.slow

# short runs of each task (the classification CNN long enough to be confident: INT8 must keep its decisions)
TASKS = {
    "classification": ["model=cnn", "trainer.max_epochs=2"],
    "regression": ["experiment=diabetes_regression", "model.dropout=0", "data.batch_size=32", "trainer.max_epochs=1"],
    "language_model": [
        *("experiment=char_lm", "data.max_chars=12000", "data.block_size=32", "data.batch_size=16"),
        *("model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.dropout=0", "trainer.max_epochs=1"),
    ],
}
QUANTIZE = {
    "classification": [
        "export.int8.quantize=both",
        "export.int8.calibration_samples=64",
        "export.int8.latency_runs=10",
    ],
    "regression": ["export.int8.quantize=static", "export.int8.calibration_samples=32", "export.int8.latency_runs=2"],
}
QUANTIZE["language_model"] = QUANTIZE["regression"]


def _ok(script: str, run_dir: Path, *overrides: str) -> Run:
    run = Run(run_script(script, f"hydra.run.dir={run_dir}", "logger=none", *overrides), run_dir)
    assert run.proc.returncode == 0, run.output[-4000:]
    return run


@pytest.fixture(scope="module", params=list(TASKS))
def exported(request, shared_dir) -> tuple[str, Run]:
    """Each task trained briefly, then exported to ONNX with INT8 (once for the session's workers)."""
    task, root = request.param, shared_dir / f"int8-{request.param}"
    log = root / "export.output.txt"  # what the export printed, for the test that reads its log

    def make() -> None:
        _ok("train.py", root / "train", *TASKS[task])
        best = root / "train" / "checkpoints" / "best.pt"
        run = _ok("export.py", root / "export", f"ckpt_path={best}", "export.formats=[onnx]", *QUANTIZE[task])
        log.write_text(run.output)

    made_once(root, make)
    return task, Run(subprocess.CompletedProcess([], 0, log.read_text(), ""), root / "export")


def test_int8_variants_are_published_scored_against_fp32_and_one_recommended(exported) -> None:
    task, run = exported
    manifest = json.loads((run.dir / "export_manifest.json").read_text())
    q = manifest["quantization"]
    assert q["metric"] == {"classification": "acc", "regression": "rmse", "language_model": "loss"}[task]
    fp32 = q["variants"]["fp32"]
    variants = {"dynamic": ("onnx_int8", "model.int8.onnx"), "static": ("onnx_int8_static", "model.int8-static.onnx")}
    for variant in q["variants"].keys() - {"fp32"}:
        v, (key, file) = q["variants"][variant], variants[variant]
        assert v["status"] == "ok" and v["file"] == file and manifest["artifacts"][key]["file"] == file
        assert manifest["artifacts"][key]["sha256"] and (run.dir / file).is_file()
        assert v["delta"] == pytest.approx(v["metric"] - fp32["metric"]) and v["within_tolerance"] == (
            v["worse_by"] <= q["tolerance"]
        )
        assert (v["agreement"] is None) == (task == "regression")  # no decisions to agree on
        assert set(v["latency_ms"]) == {"batch1", "batch32"} and all(ms > 0 for ms in v["latency_ms"].values())
        assert v["speedup"]["batch32"] == pytest.approx(fp32["latency_ms"]["batch32"] / v["latency_ms"]["batch32"])
    recommended = q["recommended"]
    assert recommended["file"] == q["variants"][recommended["variant"]]["file"] and recommended["reason"]
    assert "recommended: " + recommended["file"] in run.output  # the table in the log
    figures = run.summary()
    assert all(figures[f"export/quantize/{name}/batch1_ms"] > 0 for name in q["variants"])
    if task != "classification":
        assert set(q["variants"]) == {"fp32", "static"} and recommended["variant"] in ("fp32", "static")
        return
    assert set(q["variants"]) == {"fp32", "dynamic", "static"} and q["calibration_samples"] == 64
    best = torch.load(run.dir.parent / "train" / "checkpoints" / "best.pt", weights_only=True)
    assert fp32["metric"] == pytest.approx(best["progress"]["best_metric"], abs=1e-6)  # fp32 ONNX = eager val/acc
    for variant in ("dynamic", "static"):  # a digits CNN keeps its decisions and its accuracy
        assert q["variants"][variant]["agreement"] > 0.9 and abs(q["variants"][variant]["delta"]) < 0.05


def test_the_int8_files_run_in_onnxruntime(exported) -> None:
    """Not trusting the manifest's figures: each INT8 file runs inputs of the declared dtype with an odd batch size
    (and sequence length) and gives outputs of fp32's shape."""
    import numpy as np
    import onnxruntime as ort

    _, run = exported
    manifest = json.loads((run.dir / "export_manifest.json").read_text())
    spec = manifest["input"]
    shape = [7 if size == "batch" else 5 if isinstance(size, str) else size for size in spec["shape"]]
    x = np.random.default_rng(0).integers(0, 10, shape).astype(spec["dtype"])  # token ids or values alike
    files = [v["file"] for name, v in manifest["quantization"]["variants"].items() if name != "fp32"]

    def outputs(name: str) -> np.ndarray:
        session = ort.InferenceSession(str(run.dir / name), providers=["CPUExecutionProvider"])
        return session.run(None, {spec["name"]: x})[0]

    assert files and all(outputs(name).shape == outputs("model.onnx").shape for name in files)


def test_int8_without_onnx_is_refused_in_one_line(tmp_path) -> None:
    """Refused while the config is checked: the checkpoint is never read."""
    overrides = ["ckpt_path=no/such/best.pt", "export.formats=[pt2]", "export.int8.quantize=static"]
    run = Run(run_script("export.py", f"hydra.run.dir={tmp_path}", "logger=none", *overrides), tmp_path)
    assert run.proc.returncode == 1 and "Traceback" not in run.output
    assert run.proc.stderr.strip().splitlines()[-1] == (
        "error: export.int8.quantize=static quantizes the ONNX model: add onnx to export.formats"
    )
