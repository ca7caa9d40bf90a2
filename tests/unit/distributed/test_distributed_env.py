"""Rank discovery without a launcher of our own: torchrun's variables, SLURM's, and who writes the run dir."""

from __future__ import annotations

import os
import tempfile

import pytest

from lab.distributed import env
from lab.distributed.parallel import ShardSampler

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for key in (
        *TORCHRUN,
        "SLURM_NTASKS",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NNODES",
        "SLURM_JOB_ID",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_JOB_NODELIST",
    ):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_a_plain_process_is_not_a_worker(clean_env):
    assert not env.launched_as_worker()
    assert env.keep_hydra_outputs_to_rank_zero(["train.py", "dist=ddp"]) == ["train.py", "dist=ddp"]


def test_slurm_tasks_become_ranks_that_agree_on_the_rendezvous(clean_env):
    clean_env.setenv("SLURM_NTASKS", "4")
    clean_env.setenv("SLURM_PROCID", "3")
    clean_env.setenv("SLURM_LOCALID", "1")
    clean_env.setenv("SLURM_NNODES", "1")
    clean_env.setenv("SLURM_JOB_ID", "123456")
    clean_env.setenv("SLURM_NTASKS_PER_NODE", "4(x1)")
    assert not env.launched_as_worker()  # a probe: only adopting them (once, at the entry) writes the variables
    env.adopt_slurm_ranks()
    assert env.launched_as_worker()
    assert [os.environ[k] for k in TORCHRUN] == ["3", "4", "1", "4", "127.0.0.1", str(20000 + 123456 % 20000)]


def test_a_single_slurm_task_spawns_its_own_workers(clean_env):
    clean_env.setenv("SLURM_NTASKS", "1")
    clean_env.setenv("SLURM_PROCID", "0")
    env.adopt_slurm_ranks()
    assert not env.launched_as_worker()


def test_only_rank_zero_keeps_hydra_outputs(clean_env, tmp_path):
    for key, value in zip(TORCHRUN, ("1", "2", "1", "2", "127.0.0.1", "29500")):
        clean_env.setenv(key, value)
    clean_env.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp puts the scratch dir
    argv = env.keep_hydra_outputs_to_rank_zero(["train.py", "dist=ddp"])
    scratch = argv[2].removeprefix("hydra.run.dir=")
    assert scratch.startswith(str(tmp_path)) and "hydra.output_subdir=null" in argv
    clean_env.setenv("RANK", "0")
    assert env.keep_hydra_outputs_to_rank_zero(["train.py"]) == ["train.py"]


@pytest.mark.parametrize("size,world", [(5, 2), (6, 3), (1, 2), (7, 1)])
def test_evaluation_shards_cover_every_sample_once_with_equal_lengths(size, world):
    shards = [ShardSampler(size, rank, world) for rank in range(world)]
    assert len({len(s) for s in shards}) == 1  # equal batch counts keep collectives in step
    real = sorted(i for s in shards for i in list(s)[: s.num_valid])
    assert real == list(range(size))
