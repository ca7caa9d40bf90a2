"""Where and how the computation runs: device, seeding, backend flags, precision."""

from __future__ import annotations

import contextlib
import logging
import os
import random
from dataclasses import dataclass

import numpy as np
import torch

from lab.errors import ConfigError

log = logging.getLogger(__name__)


def select_device(name: str, local_rank: int = 0) -> torch.device:
    """One device, decided once; every tensor move in the run goes through it. Rank r of a node gets GPU r."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank)
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but CUDA is not available; use trainer.device=auto or cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device=mps but MPS is not available; use trainer.device=auto or cpu")
    return torch.device(name, local_rank) if name == "cuda" else torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all CUDA devices too). DataLoader workers: lab.data.seed_worker."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch_generator_seed(seed: int, epoch: int) -> int:
    """Shuffle seed of one epoch: a function of (seed, epoch) only, so a resumed run replays the same order."""
    return seed * 1_000_003 + epoch


def configure_backends(trainer_cfg, device: torch.device) -> None:
    """Determinism, cuDNN autotuning and TF32. The CUDA-only switches say so when they cannot apply."""
    if trainer_cfg.deterministic:
        # cuBLAS needs this before its first call to be deterministic; harmless elsewhere.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
    if device.type != "cuda":
        if trainer_cfg.cudnn_benchmark:
            log.info("trainer.cudnn_benchmark has no effect on %s (cuDNN is CUDA-only)", device.type)
        return
    # benchmark autotunes conv algorithms per input shape: faster for fixed shapes, slower when shapes vary.
    torch.backends.cudnn.benchmark = trainer_cfg.cudnn_benchmark and not trainer_cfg.deterministic
    torch.backends.cuda.matmul.allow_tf32 = trainer_cfg.tf32
    torch.backends.cudnn.allow_tf32 = trainer_cfg.tf32


@dataclass(frozen=True)
class Precision:
    """The resolved precision policy for one device."""

    name: str
    autocast_dtype: torch.dtype | None  # None = plain fp32
    grad_scaler: bool

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def describe(self) -> str:
        dtype = "float32" if self.autocast_dtype is None else f"autocast {str(self.autocast_dtype).split('.')[-1]}"
        return f"{self.name} ({dtype}{', GradScaler' if self.grad_scaler else ''})"


_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_precision(precision_cfg, device: torch.device) -> Precision:
    """`amp` means float16 + GradScaler on CUDA and bfloat16 elsewhere (float16 matmuls are slow on CPUs)."""
    name = precision_cfg.name
    if name == "fp32":
        return Precision(name, None, False)
    if precision_cfg.dtype is not None:
        dtype = _DTYPES[precision_cfg.dtype]
    else:
        dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"precision={name} needs bfloat16, which this GPU lacks; use precision=fp16 or amp")
    if device.type == "cpu" and dtype == torch.float16:
        log.warning("precision=%s on CPU: float16 autocast works but is usually slower than bf16 there", name)
    # Loss scaling only matters for float16 gradients; bfloat16 has fp32's exponent range.
    scaler = precision_cfg.grad_scaler and dtype == torch.float16 and device.type in ("cuda", "cpu")
    return Precision(name, dtype, scaler)


def peak_memory_mb(device: torch.device) -> float:
    """Peak allocated accelerator memory, or the process's peak resident memory on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
