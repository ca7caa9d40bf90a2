"""Where and how the computation runs: device, seeding, backend flags, precision."""

from __future__ import annotations

import contextlib
import logging
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from lab.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from lab.config.training import PrecisionConfig, TrainerConfig

log = logging.getLogger(__name__)


def cuda_index(local_rank: int) -> int:
    """Return the index of local rank r's GPU among the GPUs this process can see.

    A launcher that gives each rank its own GPU (`srun --gpus-per-task=1`, CUDA_VISIBLE_DEVICES) leaves one visible
    device, index 0, so `cuda:LOCAL_RANK` would be an invalid ordinal there."""
    visible = torch.cuda.device_count()
    if visible == 0:
        raise ConfigError("no CUDA device is visible (CUDA_VISIBLE_DEVICES?); use trainer.device=cpu")
    return local_rank % visible


def select_device(name: str, local_rank: int = 0) -> torch.device:
    """Pick the run's one device; every tensor move goes through it. Rank r of a node gets its own GPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", cuda_index(local_rank))
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but CUDA is not available; use trainer.device=auto or cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device=mps but MPS is not available; use trainer.device=auto or cpu")
    return torch.device(name, cuda_index(local_rank)) if name == "cuda" else torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch, all CUDA devices too. DataLoader workers: `lab.data.loaders.seed_worker`."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def epoch_generator_seed(seed: int, epoch: int) -> int:
    """Return an epoch's shuffle seed. It depends on (seed, epoch) only, so a resumed run replays the same order."""
    return seed * 1_000_003 + epoch


def configure_backends(trainer_cfg: TrainerConfig | DictConfig, device: torch.device) -> None:
    """Set determinism, cuDNN autotuning and TF32 both ways, so these process-wide flags never leak between jobs."""
    deterministic = bool(trainer_cfg.deterministic)
    if deterministic:
        # cuBLAS needs this before its first call to be deterministic; harmless elsewhere.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if torch.are_deterministic_algorithms_enabled() != deterministic:
        # only on a change, since torch's setter imports torch._inductor (about a second)
        torch.use_deterministic_algorithms(deterministic, warn_only=True)
    torch.backends.cudnn.deterministic = deterministic
    # benchmark autotunes conv algorithms per input shape. Faster for fixed shapes, slower when shapes vary.
    torch.backends.cudnn.benchmark = bool(trainer_cfg.cudnn_benchmark) and not deterministic
    torch.backends.cuda.matmul.allow_tf32 = bool(trainer_cfg.tf32)
    torch.backends.cudnn.allow_tf32 = bool(trainer_cfg.tf32)
    if device.type != "cuda" and trainer_cfg.cudnn_benchmark:
        log.info("trainer.cudnn_benchmark has no effect on %s (cuDNN is CUDA-only)", device.type)


_NO_CONTEXT = contextlib.nullcontext()  # reused, to save an allocation per step in the hot loop


@dataclass(frozen=True)
class Precision:
    """The resolved precision policy for one device."""

    name: str
    autocast_dtype: torch.dtype | None  # None = plain fp32
    grad_scaler: bool

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return _NO_CONTEXT
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def describe(self) -> str:
        dtype = "float32" if self.autocast_dtype is None else f"autocast {str(self.autocast_dtype).split('.')[-1]}"
        return f"{self.name} ({dtype}{', GradScaler' if self.grad_scaler else ''})"


_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_precision(precision_cfg: PrecisionConfig | DictConfig, device: torch.device) -> Precision:
    """Resolve the precision option (or a checkpoint's saved node) for this device.

    A null dtype means float16 with GradScaler on CUDA, and bfloat16 elsewhere, as float16 matmuls are slow on CPUs."""
    from lab.config.options import instantiate

    precision_cfg = instantiate("precision", precision_cfg, drop_unknown=True)
    name = precision_cfg.name
    if not precision_cfg.autocast:
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


def apply_channels_last(model: torch.nn.Module, enabled: bool, shards_weights: bool) -> torch.nn.Module:
    """Make the weights NHWC for trainer.channels_last, the layout tensor cores prefer.

    Inputs are made NHWC where batches reach the device. Under FSDP only the inputs are: FSDP2 refuses NHWC-strided
    parameters, and a convolution follows its input's format anyway. Eval applies the same rule with the training
    run's strategy, so it computes what validation computed."""
    if enabled and not shards_weights:
        return model.to(memory_format=torch.channels_last)
    return model


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory measurement on CUDA. The CPU's peak RSS cannot be reset."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """Return peak accelerator memory in MiB since `reset_peak_memory`, or the process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
