"""Measure fp32 and INT8 ONNX models side by side, and recommend which to ship in export_manifest.json.

The recommendation is the fastest variant whose validation metric stays within a tolerance of fp32's. Each variant
is scored with the task's own metric on the whole validation split, and its decisions are compared with fp32's
(`task.agreement`). Latency is the median of interleaved calls at batch 1 and 32, so a load change hits all
variants alike. A variant that cannot be quantized or run is recorded as skipped, with the reason; the export goes
on. :func:`run` is the export step (`export.int8`).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from lab.data import batches as batching
from lab.exporting import manifest
from lab.exporting.parity import Runner, take
from lab.exporting.steps import Export
from lab.extensions.int8 import quantize
from lab.files import publish, staged
from lab.inference.backends import OnnxBackend

log = logging.getLogger(__name__)

LATENCY_BATCHES = (1, 32)
# A quantized model is approximate, so it must be clearly faster to be worth it. Below 1.2x (geometric mean over
# LATENCY_BATCHES) the ranking is within timing noise on a busy CPU, so the exact fp32 model wins.
MIN_SPEEDUP = 1.2
_WARMUP = 3
_CPU = torch.device("cpu")


def score(
    runner: Runner, loader: DataLoader, task: Any, reference: Sequence[torch.Tensor] | None = None
) -> tuple[dict[str, float], list[torch.Tensor], float | None]:
    """Return (the task's metrics over the loader, the outputs per batch, the share of decisions agreeing with
    `reference`'s). The share is None without a reference, or for a task without decisions."""
    metrics, outputs, count = task.metrics(_CPU), [], 0
    agree: float | None = 0.0  # None once a batch has no agreement figure
    for index, batch in enumerate(loader):
        inputs, targets = batching.to_device(batching.split(batch), _CPU)
        out = runner(inputs).float()
        metrics.update(out, targets)
        outputs.append(out)
        share = None if reference is None else task.agreement(reference[index], out)
        agree = None if share is None or agree is None else agree + share * len(out)
        count += len(out)
    return metrics.compute(), outputs, None if reference is None or agree is None else agree / max(count, 1)


def latencies(runners: dict[str, Runner], example: torch.Tensor, batch_size: int, runs: int) -> dict[str, float]:
    """Return each runner's median milliseconds per call at `batch_size`, with calls interleaved across runners."""
    reps = -(-batch_size // len(example))
    inputs = example.repeat(reps, *([1] * (example.ndim - 1)))[:batch_size].contiguous()
    for runner in runners.values():
        for _ in range(_WARMUP):
            runner(inputs)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(runs):
        for name, runner in runners.items():
            start = time.perf_counter()
            runner(inputs)
            times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def worse_by(value: float, reference: float, mode: str) -> float:
    """Return how much worse `value` is than `reference`, as a fraction of it; negative is better, nan stays nan."""
    change = (reference - value) if mode == "max" else (value - reference)
    return change / max(abs(reference), 1e-12)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if all(v > 0 for v in values) else 0.0


def recommend(variants: dict[str, dict[str, Any]], metric: str, tolerance: float) -> dict[str, Any]:
    """Pick the fastest variant within `tolerance` of fp32's metric and at least MIN_SPEEDUP faster, else fp32.

    Returns the choice and the reason in words."""
    fp32 = variants["fp32"]
    ok = {name: v for name, v in variants.items() if name != "fp32" and v["status"] == "ok"}
    fitting = {name: _geomean(list(v["speedup"].values())) for name, v in ok.items() if v["within_tolerance"]}
    best = max(fitting, key=fitting.__getitem__, default=None)
    if best is not None and fitting[best] >= MIN_SPEEDUP:
        v = variants[best]
        per_batch = ", ".join(f"{b} x{s:.2f}" for b, s in v["speedup"].items())
        reason = (
            f"{best} INT8 is x{fitting[best]:.2f} as fast as fp32 ({per_batch}) and its val {metric} "
            f"{v['metric']:.4g} vs {fp32['metric']:.4g} is within {tolerance:.1%} of fp32's"
        )
        return {"variant": best, "file": v["file"], "reason": reason}
    why = []
    for name, v in variants.items():
        if name == "fp32":
            continue
        if v["status"] != "ok":
            why.append(f"{name} skipped ({v['reason']})")
        elif not v["within_tolerance"]:
            why.append(
                f"{name}'s val {metric} {v['metric']:.4g} is {v['worse_by']:.1%} worse than fp32's "
                f"{fp32['metric']:.4g} (tolerance {tolerance:.1%})"
            )
        else:
            why.append(f"{name} is only x{fitting[name]:.2f} as fast as fp32 (x{MIN_SPEEDUP} needed)")
    return {"variant": "fp32", "file": fp32["file"], "reason": "fp32: " + "; ".join(why)}


def table(report: dict[str, Any]) -> list[str]:
    """Format the report as a few aligned lines for the log."""
    metric = report["metric"]
    head = f"{'variant':8} {'file':24} {'val ' + metric:>10} {'delta':>9} {'agree':>7}"
    head += "".join(f" {b + ' ms':>12}" for b in report["variants"]["fp32"]["latency_ms"]) + "  speedup"
    lines = [head]
    for name, v in report["variants"].items():
        if v["status"] != "ok":
            lines.append(f"{name:8} {v['file']:24} skipped: {v['reason']}")
            continue
        agree = "-" if v.get("agreement") is None else f"{v['agreement']:.4f}"
        delta = "-" if name == "fp32" else f"{v['delta']:+.4f}"
        row = f"{name:8} {v['file']:24} {v['metric']:>10.4f} {delta:>9} {agree:>7}"
        row += "".join(f" {ms:>12.3f}" for ms in v["latency_ms"].values())
        lines.append(row + "  " + "/".join(f"x{s:.2f}" for s in v["speedup"].values()))
    recommended = report["recommended"]
    lines.append(f"recommended: {recommended['file']} ({recommended['reason']})")
    return lines


def _artifact(path: Path, variant: str) -> dict[str, Any]:
    return {
        "file": path.name,
        "files": [path.name],
        "bytes": path.stat().st_size,
        "sha256": manifest.sha256(path),
        "status": "ok",
        "notes": [
            f"{variant} INT8 (onnxruntime.quantization): approximate by design, not held to export.tolerance; "
            "see quantization for its metric, agreement and latency"
        ],
    }


def build(
    onnx_path: Path,
    mode: str,
    *,
    task: Any,
    val_loader: DataLoader,
    calibration: Sequence[torch.Tensor],
    example: torch.Tensor,
    runs: int,
    tolerance: float,
    open_runner: Callable[[Path], Runner],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Quantize `onnx_path` per `mode`, next to it, and measure every variant against it.

    Returns (the manifest's quantization section, the artifact entries of the INT8 files written)."""
    fp32 = open_runner(onnx_path)
    fp32_metrics, reference, _ = score(fp32, val_loader, task)
    runners = {"fp32": fp32}
    variants: dict[str, dict[str, Any]] = {"fp32": {"file": onnx_path.name, "status": "ok", "metrics": fp32_metrics}}
    artifacts = {}
    for variant in quantize.MODES[mode]:
        key, name = quantize.VARIANTS[variant]
        # work in a staging folder, so the final name appears only for a model that ran
        with staged(onnx_path.parent, name) as stage:
            try:
                path = quantize.quantize(variant, onnx_path, stage, calibration)
                runner = open_runner(path)  # onnxruntime holds the model in memory from here on
                metrics, _, agreement = score(runner, val_loader, task, reference)
            except Exception as err:  # onnxruntime raises its own types; a failed variant is not fatal
                log.warning("%s INT8 skipped", variant, exc_info=True)
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                variants[variant] = {"file": name, "status": "skipped", "reason": f"{type(err).__name__}: {first}"}
                continue
            artifacts[key] = _artifact(path, variant)
            publish([path], onnx_path.parent)
        runners[variant] = runner
        variants[variant] = {"file": name, "status": "ok", "metrics": metrics, "agreement": agreement}

    ms = {f"batch{b}": latencies(runners, example, b, runs) for b in LATENCY_BATCHES}
    fp32_value = fp32_metrics[task.monitor]
    for name in runners:
        v = variants[name]
        v["metric"] = v["metrics"][task.monitor]
        v["latency_ms"] = {batch: per_runner[name] for batch, per_runner in ms.items()}
        v["speedup"] = {batch: per_runner["fp32"] / per_runner[name] for batch, per_runner in ms.items()}
        if name != "fp32":
            v["delta"] = v["metric"] - fp32_value
            v["worse_by"] = worse_by(v["metric"], fp32_value, task.mode)
            v["within_tolerance"] = bool(v["worse_by"] <= tolerance)  # False for nan
    report = {
        "metric": task.monitor,
        "mode": task.mode,
        "tolerance": tolerance,
        "val_samples": sum(len(r) for r in reference),
        "calibration_samples": sum(len(b) for b in calibration) if "static" in quantize.MODES[mode] else None,
        "variants": variants,
    }
    report["recommended"] = recommend(variants, task.monitor, tolerance)
    for line in table(report):
        log.info("%s", line)
    return report, artifacts


def figures(report: dict[str, Any]) -> dict[str, float]:
    """Flatten the report into wandb metric names: export/quantize/<variant>/val_<metric>, .../batch1_ms, ..."""
    out: dict[str, float] = {}
    metric = report["metric"]
    for name, v in report["variants"].items():
        if v["status"] != "ok":
            continue
        out[f"export/quantize/{name}/val_{metric}"] = v["metric"]
        for key in ("delta", "agreement"):
            if v.get(key) is not None:
                out[f"export/quantize/{name}/{key}"] = v[key]
        for batch, ms in v["latency_ms"].items():
            out[f"export/quantize/{name}/{batch}_ms"] = ms
            out[f"export/quantize/{name}/{batch}_speedup"] = v["speedup"][batch]
    return out


def run(export: Export, quantize: str | None, calibration_samples: int, latency_runs: int, tolerance: float) -> None:
    """Run the export step, whose arguments are export.int8.*.

    With `quantize` set and model.onnx published, it writes and measures the INT8 variants and adds their files to
    the artifacts. The manifest's `quantization` section is the report, or null."""
    export.sections["quantization"] = None
    if not quantize or "onnx" not in export.artifacts:
        return
    report, quantized = build(
        export.run_dir / "model.onnx",
        quantize,
        task=export.task,
        val_loader=export.val_loader,
        calibration=take(export.train_loader(), calibration_samples),
        example=export.example,
        runs=latency_runs,
        tolerance=tolerance,
        open_runner=OnnxBackend,
    )
    export.artifacts.update(quantized)
    export.sections["quantization"] = report
    export.figures.update(figures(report))
