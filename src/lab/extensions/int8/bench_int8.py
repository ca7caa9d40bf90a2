"""INT8 vs fp32 ONNX models, through the real entry scripts: train, then `scripts/export.py export.int8.quantize=both`.

    python -m lab.extensions.int8.bench_int8                # the default CNN on digits, ResNet-18 on CIFAR-sized noise
    python -m lab.extensions.int8.bench_int8 --models cnn   # one of them

For each model it prints the export's table: the val metric of fp32, dynamic and static INT8, agreement with fp32,
latency at batch 1 and 32 and the speed-up, then the recommended variant and why. ResNet-18 trains only a few steps
on noise, so its accuracy means nothing, but its agreement and latency do: its convolutions are big enough for
static INT8 kernels to win. `model=resnet18` comes with the `pretrained` extension: without it, the CNN alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from lab import extensions
from lab.extensions.int8.int8_report import table

REPO = Path(__file__).resolve().parents[4]
MODELS = {
    "cnn": ["trainer.max_epochs=3"],  # the default experiment: SmallCNN on digits
    "resnet18": ["model=resnet18", "data=synthetic", "data.num_samples=512", "trainer.max_steps=3"],
}


def _run(script: str, run_dir: Path, *overrides: str) -> None:
    command = [sys.executable, str(REPO / "scripts" / script), f"hydra.run.dir={run_dir}", "logger=none", *overrides]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{script} {' '.join(overrides)} failed:\n{proc.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # another extension's preset is there only while that extension is (an extension never imports another)
    present = [
        name
        for name in MODELS
        if name == "cnn" or any(conf.glob(f"model/{name}.yaml") for conf in extensions.conf_dirs())
    ]
    parser.add_argument("--models", nargs="+", choices=present, default=present)
    parser.add_argument("--runs", type=int, default=30, help="timed calls per batch size and variant")
    args = parser.parse_args(argv)
    reports = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            train, export = Path(tmp) / name / "train", Path(tmp) / name / "export"
            _run("train.py", train, "trainer.progress_bar=off", *MODELS[name])
            _run(
                "export.py",
                export,
                f"ckpt_path={train / 'checkpoints' / 'best.pt'}",
                "export.formats=[onnx]",
                "export.int8.quantize=both",
                f"export.int8.latency_runs={args.runs}",
            )
            report = json.loads((export / "export_manifest.json").read_text())["quantization"]
            reports[name] = report
            print(f"\n{name} ({' '.join(MODELS[name])})")
            print("\n".join(table(report)))
    return reports


if __name__ == "__main__":
    main()
