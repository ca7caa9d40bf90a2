"""Measure training throughput and MFU of ResNet-18 (CIFAR-sized) and ResNet-50 (224x224) on a GPU.

The images are synthetic. Each model runs in fp32 (TF32 matmuls, the template's default), bf16 autocast, and
bf16 + channels_last + torch.compile.

    python -m lab.extensions.pretrained.bench_gpu_throughput          # needs CUDA; about 3-5 minutes on one H100/H200
    python -m lab.extensions.pretrained.bench_gpu_throughput --tiny   # tiny sizes on the CPU (compile with the eager
                                       # backend): checks the script itself; add --peak-flops 1e12 for an MFU column

A training step is the real thing: forward, cross-entropy, backward, SGD with momentum. The batch lives on the
device, so the data pipeline is not measured (bench/device_loader.py does that). The models are this extension's
(`model=resnet18`, `model=torchvision model.arch=resnet50`). FLOPs per image (forward + backward) are counted once
with lab.training.flops. MFU = images/s x FLOPs per image / the GPU's dense peak for the variant's dtype
(lab.training.flops.PEAK_FLOPS). Prints img/s, MFU and each variant's speed-up over fp32.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from lab.data.common import make_meta
from lab.extensions.pretrained.options import TorchvisionConfig
from lab.models import common
from lab.runtime import Precision
from lab.tasks.classification import Classification
from lab.training import flops


@dataclass
class Case:
    name: str
    arch: str
    small_input: bool  # the CIFAR stem (3x3 stride 1, no max-pool)
    image_size: int
    batch_size: int


GPU_CASES = [
    Case("resnet18 cifar 32px", "resnet18", small_input=True, image_size=32, batch_size=512),
    Case("resnet50 224px", "resnet50", small_input=False, image_size=224, batch_size=128),
]
# --tiny runs both stems (CIFAR, ImageNet) on ResNet-18 at a few pixels, in seconds on a busy CPU
TINY_CASES = [
    Case("resnet18 tiny 8px", "resnet18", small_input=True, image_size=8, batch_size=2),
    Case("resnet18 imagenet 32px", "resnet18", small_input=False, image_size=32, batch_size=2),
]
# variant -> (autocast dtype, channels_last, compile)
VARIANTS = {
    "fp32": (None, False, False),
    "bf16": (torch.bfloat16, False, False),
    "bf16+cl+compile": (torch.bfloat16, True, True),
}


def build_model(case: Case, device: torch.device) -> torch.nn.Module:
    meta = make_meta(10, 3, case.image_size, [0.5] * 3, [0.25] * 3, [str(c) for c in range(10)])
    cfg = OmegaConf.structured(TorchvisionConfig(arch=case.arch, small_input=case.small_input))
    return common.build(cfg, meta).to(device)


def measure(
    case: Case, variant: str, device: torch.device, warmup: int, steps: int, compile_backend: str
) -> tuple[float, int]:
    """Return images/s over `steps` timed steps after `warmup` ones, and one image's forward + backward FLOPs."""
    dtype, channels_last, compiled = VARIANTS[variant]
    torch.manual_seed(0)
    model = build_model(case, device)
    precision = Precision(variant, dtype, grad_scaler=False)
    inputs = torch.randn(case.batch_size, 3, case.image_size, case.image_size, device=device)
    targets = torch.randint(0, 10, (case.batch_size,), device=device)
    task = Classification(10)  # the template's loss: cross-entropy summed in fp32
    batch_flops = flops.count_flops(model, task, inputs, targets, device, precision)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    forward = torch.compile(model, backend=compile_backend) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()

    def step() -> None:
        with precision.autocast(device):
            outputs = forward(inputs)
        task.loss(outputs, targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):  # includes compilation and cuDNN's algorithm search
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return steps * case.batch_size / (time.perf_counter() - start), batch_flops // case.batch_size


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes on the CPU: checks the script, not a GPU")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per variant (default 30; --tiny 2)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 10; --tiny 1)")
    parser.add_argument("--peak-flops", type=float, default=None, help="FLOP/s of the device (default: the table)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        parser.error("no CUDA device here: run with --tiny to check the script on the CPU")
    device = torch.device("cpu" if args.tiny else "cuda")
    cases = TINY_CASES if args.tiny else GPU_CASES
    steps = args.steps or (2 if args.tiny else 30)
    warmup = args.warmup or (1 if args.tiny else 10)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # trainer.tf32's default
    torch.backends.cudnn.benchmark = True  # fixed shapes
    name = "CPU" if args.tiny else torch.cuda.get_device_name(device)
    print(f"{name}, torch {torch.__version__}; {steps} timed steps after {warmup} warm-up steps per variant")
    print(f"{'model':22} {'variant':16} {'batch':>5} {'img/s':>10} {'GFLOP/img':>10} {'MFU':>7} {'vs fp32':>8}")
    rows = []
    for case in cases:
        baseline = None
        for variant, (dtype, _, _) in VARIANTS.items():
            images_per_s, image_flops = measure(
                case, variant, device, warmup, steps, compile_backend="eager" if args.tiny else "inductor"
            )
            peak = flops.peak_flops(args.peak_flops, device, dtype, tf32=True)
            mfu = None if peak is None else images_per_s * image_flops / peak
            baseline = baseline or images_per_s
            rows.append(
                {
                    "model": case.name,
                    "variant": variant,
                    "batch_size": case.batch_size,
                    "images_per_s": images_per_s,
                    "flops_per_image": image_flops,
                    "peak_flops": peak,
                    "mfu": mfu,
                    "speedup": images_per_s / baseline,
                }
            )
            shown = "n/a" if mfu is None else f"{100 * mfu:.1f}%"
            print(
                f"{case.name:22} {variant:16} {case.batch_size:>5} {images_per_s:>10.1f} {image_flops / 1e9:>10.3f} "
                f"{shown:>7} {images_per_s / baseline:>7.2f}x",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
