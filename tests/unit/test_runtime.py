"""lab.runtime: precision policy per device, device selection, seeding."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from lab import runtime
from lab.errors import ConfigError
from lab.runtime import Precision, epoch_generator_seed, resolve_precision, seed_everything, select_device

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("name", "dtype", "scaler"),
    [
        ("fp32", None, False),
        ("amp", torch.bfloat16, False),  # float16 is slow on CPUs; bfloat16 needs no loss scaling
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, True),
    ],
)
def test_resolve_precision_on_cpu(compose, name: str, dtype: torch.dtype | None, scaler: bool) -> None:
    cfg = compose([f"precision={name}"])
    precision = resolve_precision(cfg.precision, CPU)
    assert precision == Precision(name, dtype, scaler)
    assert name in precision.describe() and ("GradScaler" in precision.describe()) == scaler


def test_resolve_amp_on_cuda_is_float16_with_scaler(compose) -> None:
    # Only the policy: no CUDA call is made for float16 (bf16 support is queried only for bfloat16).
    precision = resolve_precision(compose(["precision=amp"]).precision, torch.device("cuda", 0))
    assert precision == Precision("amp", torch.float16, True)


def test_bf16_on_a_gpu_without_bf16_is_a_config_error(compose, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    with pytest.raises(ConfigError, match="precision=bf16"):
        resolve_precision(compose(["precision=bf16"]).precision, torch.device("cuda", 0))


def test_fp32_has_no_autocast() -> None:
    with Precision("fp32", None, False).autocast(CPU):
        assert not torch.is_autocast_enabled("cpu")
        out = torch.ones(2, 3) @ torch.ones(3, 2)
    assert out.dtype == torch.float32


def test_bf16_autocast_on_cpu_gives_bf16_matmuls(compose) -> None:
    precision = resolve_precision(compose(["precision=bf16"]).precision, CPU)
    a, b = torch.randn(4, 8), torch.randn(8, 2)
    with precision.autocast(CPU):
        out = a @ b
        linear = torch.nn.functional.linear(a, b.T)
    assert out.dtype == torch.bfloat16 and linear.dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32  # only inside the context
    torch.testing.assert_close(out.float(), a @ b, rtol=2e-2, atol=5e-2)


def test_select_device() -> None:
    assert select_device("cpu") == CPU
    assert select_device("auto").type in {"cpu", "cuda", "mps"}


@pytest.mark.parametrize("name", ["cuda", "mps"])
def test_select_unavailable_accelerator_is_a_config_error(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=rf"trainer.device={name}.*not available"):
        select_device(name)
    assert select_device("auto") == CPU


def _draws() -> tuple:
    return random.random(), np.random.rand(2).tolist(), torch.rand(2).tolist(), torch.randint(0, 100, (3,)).tolist()


@pytest.mark.parametrize("seed", [0, 42])
def test_seed_everything_is_reproducible(seed: int) -> None:
    seed_everything(seed)
    first = _draws()
    random.random(), np.random.rand(), torch.rand(1)  # disturb every generator
    seed_everything(seed)
    assert _draws() == first
    seed_everything(seed + 1)
    assert _draws() != first


def test_epoch_generator_seed_differs_across_epochs_and_seeds() -> None:
    seeds = [epoch_generator_seed(seed, epoch) for seed, epoch in itertools.product(range(10), range(200))]
    assert len(set(seeds)) == len(seeds)
    assert epoch_generator_seed(42, 3) == epoch_generator_seed(42, 3)  # a function of (seed, epoch) only
    # Usable as a torch generator seed, and different seeds give different shuffles.
    orders = {tuple(torch.randperm(50, generator=torch.Generator().manual_seed(s)).tolist()) for s in seeds[:20]}
    assert len(orders) == 20


def test_describe() -> None:
    assert Precision("fp32", None, False).describe() == "fp32 (float32)"
    assert Precision("fp16", torch.float16, True).describe() == "fp16 (autocast float16, GradScaler)"


def test_peak_memory_on_cpu_is_positive() -> None:
    assert runtime.peak_memory_mb(CPU) > 0
