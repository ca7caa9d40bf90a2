"""An FSDP model whose first forward is an evaluation (a run resumed at the end of an epoch validates before it
trains again) still trains: the evaluation loop runs under no_grad, as inference_mode would leave FSDP's unsharded
parameter buffers as inference tensors, which a training forward may not update in place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lab.runtime import Precision
from lab.training.evaluation import accumulate_metrics


class _Mean:
    """The least a task accumulator is: what the evaluation loop feeds."""

    def __init__(self) -> None:
        self.total = 0.0

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.total += float(outputs.sum())


@pytest.fixture
def one_rank_group(tmp_path: Path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_an_fsdp_model_trains_after_evaluating_first(one_rank_group) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    fully_shard(model[0])
    fully_shard(model)
    loader = DataLoader(TensorDataset(torch.randn(6, 4), torch.zeros(6)), batch_size=3)
    fp32 = Precision("fp32", autocast_dtype=None, grad_scaler=False)
    accumulate_metrics(model, loader, _Mean(), device=torch.device("cpu"), precision=fp32)
    model(torch.randn(3, 4)).square().mean().backward()  # raised "Inference tensors ..." under inference_mode
    assert all(p.grad is not None for p in model.parameters())
