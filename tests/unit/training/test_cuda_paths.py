"""The CUDA paths' logic, checked on CPU with fakes where a GPU would be needed: which GPU a rank takes, which CUDA
RNG a checkpoint keeps, host syncs in the fp16 step, peak-memory windows, process-wide flags between jobs, thread
counts of spawned ranks, fused optimizers, SyncBatchNorm under FSDP, and the device of every inference backend."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch
import torch.distributed.launcher.api
from omegaconf import OmegaConf
from torch import nn
from torch.export import passes as export_passes

import lab.training.trainer as trainer_module
from helpers import in_process_trainer
from lab import checkpointing, runtime
from lab.distributed import parallel, spawning
from lab.errors import ConfigError
from lab.inference import backends
from lab.optim.optimizers import build_optimizer
from lab.tasks.classification import Classification
from lab.training.trainer import Trainer

CPU = torch.device("cpu")


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


# --------------------------------------------------------------------------- device per rank
@pytest.mark.parametrize(("visible", "local_rank", "index"), [(8, 3, 3), (1, 3, 0), (1, 0, 0), (2, 3, 1)])
def test_a_rank_takes_a_gpu_it_can_see(monkeypatch: pytest.MonkeyPatch, visible: int, local_rank: int, index: int):
    # srun --gpus-per-task=1 or a joblib worker: rank 3 sees one GPU, cuda:0; cuda:3 would be an invalid ordinal
    _fake_gpus(monkeypatch, visible)
    assert runtime.select_device("auto", local_rank) == torch.device("cuda", index)
    assert runtime.select_device("cuda", local_rank) == torch.device("cuda", index)


def test_no_visible_gpu_is_a_config_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError, match="no CUDA device is visible"):
        runtime.cuda_index(0)


# --------------------------------------------------------------------------- CUDA RNG of the run's own device
class FakeCudaRng:
    """One generator state per fake GPU; fails like torch when asked for a GPU that is not visible."""

    def __init__(self, visible: int) -> None:
        self.states = {i: torch.full((8,), i, dtype=torch.uint8) for i in range(visible)}

    def get(self, device=None) -> torch.Tensor:
        return self.states[torch.device(device).index].clone()

    def set(self, state: torch.Tensor, device=None) -> None:
        index = torch.device(device).index
        if index not in self.states:
            raise IndexError(f"invalid device {index}")
        self.states[index] = state.clone()

    def all(self):
        raise AssertionError("every visible GPU's state: breaks a resume that sees fewer GPUs")


def _install(monkeypatch: pytest.MonkeyPatch, rng: FakeCudaRng) -> None:
    _fake_gpus(monkeypatch, len(rng.states))
    monkeypatch.setattr(torch.cuda, "get_rng_state", rng.get)
    monkeypatch.setattr(torch.cuda, "set_rng_state", rng.set)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", rng.all)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", rng.all)


def test_checkpoint_keeps_the_cuda_rng_of_its_own_gpu_and_resumes_with_fewer_visible(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    saving = FakeCudaRng(visible=4)  # rank 2 of a 4-GPU node
    _install(monkeypatch, saving)
    state = checkpointing.capture_rng(torch.device("cuda", 2))
    assert torch.equal(state["cuda"], saving.states[2])
    checkpointing.save(tmp_path / "last.pt", {"model": {}, "rng": state})

    resuming = FakeCudaRng(visible=1)  # another allocation: one GPU, seen as cuda:0
    _install(monkeypatch, resuming)
    loaded = torch.load(tmp_path / "last.pt", weights_only=True)["rng"]
    checkpointing.restore_rng(loaded, torch.device("cuda", 0))
    assert torch.equal(resuming.states[0], saving.states[2])


def test_cpu_runs_save_no_cuda_rng_and_old_per_gpu_lists_still_restore(monkeypatch: pytest.MonkeyPatch):
    assert checkpointing.capture_rng(CPU)["cuda"] is None
    rng = FakeCudaRng(visible=1)
    _install(monkeypatch, rng)
    legacy = {**checkpointing.capture_rng(CPU), "cuda": [torch.full((8,), 7, dtype=torch.uint8)] * 4}
    checkpointing.restore_rng(legacy, torch.device("cuda", 0))  # earlier format: one state per GPU visible then
    assert rng.states[0].tolist() == [7] * 8


# --------------------------------------------------------------------------- the fp16 step
def _fp16_trainer(compose, tmp_path: Path, overrides=()) -> Trainer:
    cfg = compose(["model=mlp", "precision=fp16", "trainer.progress_bar=off", "logger=none", *overrides])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 1, 8, 8), torch.randint(0, 10, (64,)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=8)
    return in_process_trainer(cfg, model, Classification(10), loader, tmp_path, total_steps=8)


def test_fp16_steps_read_no_scale_to_the_host_and_count_skipped_steps_exactly(
    compose, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    trainer = _fp16_trainer(compose, tmp_path, ["trainer.log_every_n_steps=4"])
    trainer.scaler._init_scale = 2.0**40  # fp16 gradients overflow: the scaler skips steps until the scale fits
    reads = []
    real_get_scale = torch.amp.GradScaler.get_scale

    def get_scale(scaler):
        reads.append(trainer.progress.global_step)
        return real_get_scale(scaler)

    monkeypatch.setattr(torch.amp.GradScaler, "get_scale", get_scale)
    scales = []
    real_update = torch.amp.GradScaler.update

    def update(scaler, new_scale=None):
        real_update(scaler, new_scale)
        scales.append(float(scaler._scale))

    monkeypatch.setattr(torch.amp.GradScaler, "update", update)
    trainer.train_epoch(0)
    trainer.tracker.finish()

    assert reads == [4, 8]  # at the two log lines only, never inside a step
    expected = sum(after < before for before, after in zip([2.0**40, *scales], scales))
    assert expected > 0 and int(trainer.skipped_steps) == expected == trainer.summary()["train/skipped_steps"]


def test_fused_optimizer_on_cuda_unless_the_config_chooses(compose):
    model = nn.Linear(4, 2)
    cfg = compose(["optimizer=adamw"])
    assert build_optimizer(cfg.optimizer, model, cfg.model, torch.device("cuda", 0)).defaults["fused"] is True
    assert not build_optimizer(cfg.optimizer, model, cfg.model, CPU).defaults["fused"]
    chosen = OmegaConf.merge(cfg.optimizer, {"fused": False})
    assert build_optimizer(chosen, model, cfg.model, torch.device("cuda", 0)).defaults["fused"] is False


# --------------------------------------------------------------------------- per-job state
def test_peak_memory_is_reset_where_each_measurement_starts(compose, tmp_path: Path, monkeypatch):
    resets = []
    monkeypatch.setattr(trainer_module, "reset_peak_memory", lambda device: resets.append(trainer.progress.global_step))
    trainer = _fp16_trainer(compose, tmp_path, ["trainer.log_every_n_steps=4", "trainer.max_epochs=1"])
    trainer.fit()
    trainer.tracker.finish()
    assert resets == [0, 4, 8]  # fit start (after the model summary, a previous job), then after each log line


def test_cuda_peak_memory_reset_targets_the_run_device(monkeypatch: pytest.MonkeyPatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", calls.append)
    runtime.reset_peak_memory(torch.device("cuda", 1))
    runtime.reset_peak_memory(CPU)
    assert calls == [torch.device("cuda", 1)]


def test_backend_flags_are_set_both_ways_so_a_job_does_not_inherit_the_last(compose):
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32)
    try:
        strict = compose(["trainer.deterministic=true", "trainer.tf32=false"]).trainer
        runtime.configure_backends(strict, CPU)
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        runtime.configure_backends(compose([]).trainer, CPU)  # the next job of the same worker
        assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cuda.matmul.allow_tf32 = before[1]


# --------------------------------------------------------------------------- spawned ranks
def test_spawned_ranks_share_the_cores_instead_of_each_taking_all(monkeypatch: pytest.MonkeyPatch, compose):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    seen = {}

    def fake_launch(config, worker):
        def run(*args):
            seen["threads"] = os.environ.get("OMP_NUM_THREADS")
            return {0: "rank0"}

        return run

    monkeypatch.setattr(torch.distributed.launcher.api, "elastic_launch", fake_launch)
    monkeypatch.setattr(spawning, "_start_forkserver", lambda: None)  # a real process: not in the fast tier
    cfg = compose(["dist=ddp", "dist.nproc=4"]).dist
    assert spawning.spawn(lambda: None, (), cfg) == "rank0"
    assert seen["threads"] == "4" and "OMP_NUM_THREADS" not in os.environ  # restored for the next job
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    spawning.spawn(lambda: None, (), cfg)
    assert seen["threads"] == "3"  # the user's own setting wins


# --------------------------------------------------------------------------- SyncBatchNorm
def test_sync_bn_converts_for_any_strategy_on_cuda_and_says_so_elsewhere(caplog: pytest.LogCaptureFixture):
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4))
    converted = parallel._sync_batchnorm(model, torch.device("cuda", 0))
    assert isinstance(converted[1], nn.SyncBatchNorm)
    with caplog.at_level(logging.WARNING):
        assert parallel._sync_batchnorm(model, CPU) is model
    assert "dist.sync_bn=true has no effect on cpu" in caplog.text


# --------------------------------------------------------------------------- inference backends
def test_exported_backends_run_on_the_requested_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    model = nn.Linear(3, 2).eval()
    program = torch.export.export(model, (torch.randn(2, 3),))
    torch.export.save(program, tmp_path / "m.pt2")
    moved = []

    def move(program, device):
        moved.append(device)
        return program

    monkeypatch.setattr(export_passes, "move_to_device_pass", move)
    gpu = torch.device("cuda", 0)
    assert backends.artifact_backend(tmp_path / "m.pt2", gpu).device == gpu and moved == [gpu]

    torch.jit.save(torch.jit.trace(model, torch.randn(2, 3)), tmp_path / "m.torchscript.pt")
    loaded = []
    real_load = torch.jit.load
    monkeypatch.setattr(torch.jit, "load", lambda path, map_location: loaded.append(map_location) or real_load(path))
    assert backends.artifact_backend(tmp_path / "m.torchscript.pt", gpu).device == gpu and loaded == [gpu]
    cpu_backend = backends.artifact_backend(tmp_path / "m.torchscript.pt", CPU)
    torch.testing.assert_close(cpu_backend(torch.ones(1, 3)), model(torch.ones(1, 3)))
