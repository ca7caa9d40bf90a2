"""INT8 variants of an ONNX model: real onnxruntime quantization of a small CNN, the per-variant report, a
quantizer failure recorded as skipped, the recommendation rule, the export step's additions to the export, and its
settings (`export.int8.*`) checked with the export config.

The page's benchmark, `python -m lab.extensions.int8.bench_int8`, takes minutes (it trains and exports two convnets):
not run here; what it prints is `int8_report.table` of the report these tests check."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lab.config import ConfigError, validate
from lab.errors import UserError
from lab.exporting import manifest
from lab.exporting.steps import Export
from lab.exporting.writers import write_onnx
from lab.extensions.int8 import int8_report
from lab.extensions.int8.options import Int8Config
from lab.inference.backends import OnnxBackend
from lab.models.cnn import SmallCNN
from lab.tasks.classification import Classification


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    torch.manual_seed(0)
    model = SmallCNN(1, [8, 16], 3, dropout=0.0).eval()
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    write_onnx(model, torch.randn(2, 1, 8, 8), path)
    return path


def _loader(n: int, seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = torch.randn(n, 1, 8, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator)
    return DataLoader(TensorDataset(inputs, targets), batch_size=16)


def _build(onnx_path, mode, calibration, tolerance=0.01):
    return int8_report.build(
        onnx_path,
        mode,
        task=Classification(3),
        val_loader=_loader(40, seed=1),
        calibration=calibration,
        example=torch.randn(2, 1, 8, 8),
        runs=2,
        tolerance=tolerance,
        open_runner=OnnxBackend,
    )


def test_both_variants_are_written_scored_against_fp32_and_one_is_recommended(onnx_model) -> None:
    calibration = [torch.randn(16, 1, 8, 8), torch.randn(8, 1, 8, 8)]
    report, artifacts = _build(onnx_model, "both", calibration)
    assert report["metric"] == "acc" and report["mode"] == "max"
    assert report["val_samples"] == 40 and report["calibration_samples"] == 24
    fp32 = report["variants"]["fp32"]
    for variant, key, name in (("dynamic", "onnx_int8", "model.int8.onnx"), ("static", "onnx_int8_static", None)):
        v = report["variants"][variant]
        path = onnx_model.parent / v["file"]
        assert v["status"] == "ok" and path.is_file() and (name is None or v["file"] == name)
        assert artifacts[key]["sha256"] == manifest.sha256(path) and artifacts[key]["file"] == v["file"]
        assert 0.0 <= v["agreement"] <= 1.0 and v["delta"] == pytest.approx(v["metric"] - fp32["metric"])
        assert set(v["metrics"]) == {"loss", "acc", "acc_top5"}
        assert v["within_tolerance"] == (v["worse_by"] <= 0.01)
        for batch in ("batch1", "batch32"):
            assert v["speedup"][batch] == pytest.approx(fp32["latency_ms"][batch] / v["latency_ms"][batch])
    # the static model really is QDQ: int8 weights with their quantize/dequantize pairs
    import onnx

    ops = {node.op_type for node in onnx.load(str(onnx_model.parent / "model.int8-static.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert report["recommended"]["variant"] in report["variants"] and report["recommended"]["reason"]


def test_a_variant_that_cannot_be_quantized_is_skipped_with_its_reason(onnx_model) -> None:
    wrong_shape = [torch.randn(4, 3, 8, 8)]  # 3 channels into a 1-channel model: calibration fails in onnxruntime
    folder = onnx_model.parent
    before = {p.name: p.read_bytes() for p in folder.iterdir()}  # the module's other tests may have published some
    report, artifacts = _build(onnx_model, "static", wrong_shape)
    static = report["variants"]["static"]
    assert static["status"] == "skipped" and static["reason"] and "static" not in artifacts
    # quantized in a staging folder: the failure publishes nothing, removes its staging, and leaves what was there
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert report["recommended"]["variant"] == "fp32" and "static skipped" in report["recommended"]["reason"]
    assert any(line.startswith("static") and "skipped" in line for line in int8_report.table(report))


def _variant(metric: float, speedups: tuple[float, float], tolerance: float = 0.01, mode: str = "max") -> dict:
    worse = int8_report.worse_by(metric, 0.9, mode)
    return {
        "file": f"m{metric}.onnx",
        "status": "ok",
        "metric": metric,
        "worse_by": worse,
        "within_tolerance": worse <= tolerance,
        "speedup": dict(zip(("batch1", "batch32"), speedups)),
    }


def test_recommendation_is_the_fastest_within_tolerance_and_clearly_faster_than_fp32() -> None:
    fp32 = {"file": "model.onnx", "status": "ok", "metric": 0.9, "speedup": {"batch1": 1.0, "batch32": 1.0}}
    fast_but_worse = _variant(0.85, (4.0, 4.0))  # 5.6% worse accuracy
    good = _variant(0.895, (2.0, 3.0))
    choice = int8_report.recommend({"fp32": fp32, "dynamic": fast_but_worse, "static": good}, "acc", 0.01)
    assert choice["variant"] == "static" and "x2.45" in choice["reason"]
    choice = int8_report.recommend({"fp32": fp32, "dynamic": fast_but_worse}, "acc", 0.01)
    assert choice["variant"] == "fp32" and "5.6% worse" in choice["reason"]
    loose = _variant(0.85, (4.0, 4.0), tolerance=0.1)
    assert int8_report.recommend({"fp32": fp32, "dynamic": loose}, "acc", 0.1)["variant"] == "dynamic"
    marginal = _variant(0.9, (1.1, 1.1))  # below MIN_SPEEDUP: noise, not a gain
    assert int8_report.recommend({"fp32": fp32, "static": marginal}, "acc", 0.01)["variant"] == "fp32"


def test_worse_by_follows_the_metric_direction() -> None:
    assert int8_report.worse_by(0.88, 0.9, "max") == pytest.approx(0.02 / 0.9)
    assert int8_report.worse_by(2.2, 2.0, "min") == pytest.approx(0.1)  # a higher loss is worse
    assert int8_report.worse_by(1.8, 2.0, "min") < 0
    assert math.isnan(int8_report.worse_by(math.nan, 2.0, "min"))


def _export(onnx_path, artifacts: dict) -> Export:
    calibration = _loader(24, seed=2)
    return Export(
        onnx_path.parent, Classification(3), torch.randn(2, 1, 8, 8), _loader(40, 1), lambda: calibration, artifacts
    )


def test_the_export_step_adds_its_files_its_manifest_section_and_its_figures(onnx_model) -> None:
    export = _export(onnx_model, {"onnx": {"file": "model.onnx"}})
    Int8Config(quantize="dynamic", latency_runs=2).run(export)
    report = export.sections["quantization"]
    assert set(report["variants"]) == {"fp32", "dynamic"} and report["calibration_samples"] is None
    assert export.artifacts["onnx_int8"]["file"] == "model.int8.onnx" == report["variants"]["dynamic"]["file"]
    assert export.figures == int8_report.figures(report)
    assert {"export/quantize/dynamic/val_acc", "export/quantize/fp32/batch32_speedup"} <= set(export.figures)
    # off, or no model.onnx published (it failed its parity check): the section is null, nothing else is added
    for settings, artifacts in ((Int8Config(), {"onnx": {}}), (Int8Config(quantize="both"), {"pt2": {}})):
        export = _export(onnx_model, dict(artifacts))
        settings.run(export)
        assert export.sections == {"quantization": None} and export.artifacts == artifacts and not export.figures


def test_the_settings_sit_in_the_export_config_and_are_checked_with_it(compose) -> None:
    cfg = compose(["ckpt_path=x.pt", "export.int8.quantize=both"], config_name="export")
    validate(cfg)
    assert cfg.export.int8 == {"quantize": "both", "calibration_samples": 256, "tolerance": 0.01, "latency_runs": 50}
    for overrides, message in (
        (["export.formats=[pt2]", "export.int8.quantize=static"], "add onnx to export.formats"),
        (["export.int8.quantize=int8"], "export.int8.quantize='int8' is not valid"),
        (["export.int8.latency_runs=0"], "export.int8.latency_runs must be >= 1, got 0"),
    ):
        with pytest.raises(ConfigError, match=message):
            validate(compose(["ckpt_path=x.pt", *overrides], config_name="export"))


def test_a_model_of_several_outputs_is_refused_before_any_work() -> None:
    from lab.exporting import steps
    from lab.tasks import outputs as model_outputs

    one, several = torch.randn(2, 3), (torch.randn(2, 3), torch.randn(2, 4))
    assert Int8Config(quantize="static").refuse_model(one, model_outputs.check(one)) is None
    assert Int8Config().refuse_model(several, model_outputs.check(several)) is None  # off: nothing to refuse
    opts = SimpleNamespace(steps=lambda: [Int8Config(quantize="static")])  # the export node: its steps' settings
    with pytest.raises(UserError, match=r"^export.int8.quantize takes one output tensor; this model returns a tuple"):
        steps.check(opts, several, model_outputs.check(several))
