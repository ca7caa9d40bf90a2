"""dist=fsdp's meta-device init over 2 gloo ranks: each rank builds nothing but its shards, and the gathered
weights equal the whole build's bitwise, model by model and after a few steps of real training runs."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from helpers import META_INIT_CASES, run_script
from lab.distributed import meta_init, spawning
from lab.distributed.parallel import FSDP
from lab.models.common import build as build_model

pytestmark = pytest.mark.slow

SEED = 7


@record
def _shard_and_draw(dtype: torch.dtype | None) -> dict:
    """One rank: every case built on the meta device, sharded, drawn; rank 0 returns the gathered full weights,
    the generator's state after the draw and, per rank, the size of each parameter it holds."""
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo")
    parallel = FSDP(rank=dist.get_rank(), world_size=dist.get_world_size())
    fsdp = SimpleNamespace(strategy="fsdp", meta_init=True, sync_bn=False, reshard_after_forward=True)
    results = {}
    for case, (model_cfg, data_meta) in META_INIT_CASES.items():
        torch.manual_seed(SEED)
        start = torch.random.get_rng_state()
        model = meta_init.build(model_cfg, data_meta, fsdp)
        sharded, _ = parallel.wrap(model, torch.device("cpu"), SimpleNamespace(autocast_dtype=dtype), model_cfg)
        meta_init.materialise(sharded, torch.device("cpu"), start, model_cfg)
        rng_after = torch.random.get_rng_state()
        held = {name: (isinstance(p, DTensor), p.to_local().numel()) for name, p in sharded.named_parameters()}
        results[case] = (parallel.model_state(sharded), rng_after, parallel.gather(held))
    dist.destroy_process_group()
    return results


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])  # bf16: BatchNorm in its own fp32 unit first
def test_two_ranks_draw_their_shards_of_the_whole_builds_weights(dtype) -> None:
    dist_cfg = SimpleNamespace(nproc=2, master_port=None, grace_s=5, strategy="fsdp", max_restarts=0)
    results = spawning.spawn(_shard_and_draw, (dtype,), dist_cfg)
    assert set(results) == set(META_INIT_CASES)
    for case, (model_cfg, data_meta) in META_INIT_CASES.items():
        full, rng_after, held = results[case]
        torch.manual_seed(SEED)
        whole = build_model(model_cfg, data_meta)
        expected = whole.state_dict()
        assert list(full) == list(expected), case
        for name, tensor in expected.items():
            assert full[name].dtype == tensor.dtype and torch.equal(full[name], tensor), f"{case}: {name}"
        assert torch.equal(rng_after, torch.random.get_rng_state()), case
        # sharded, not replicated: the two ranks' parts add up to each parameter, one part each
        for name, parameter in whole.named_parameters():
            assert all(rank[name][0] for rank in held), f"{case}: {name} is not a DTensor"
            assert sum(rank[name][1] for rank in held) == parameter.numel(), f"{case}: {name}"
            if parameter.shape[0] >= 2:
                assert max(rank[name][1] for rank in held) < parameter.numel(), f"{case}: {name}"


RUNS = {
    "gpt": [
        "experiment=char_lm",
        "data.max_chars=12000",
        "data.block_size=32",
        "data.batch_size=16",
        "model.n_layer=2",
        "model.n_embd=32",
        "model.n_head=2",
        "task.sample_tokens=8",
    ],
    "cnn": ["model=cnn", "precision=bf16", "model.freeze=[blocks.0.*]"],
}


@pytest.mark.parametrize("model", sorted(RUNS))
def test_a_training_run_from_the_meta_device_matches_one_from_the_whole_build(train, model: str) -> None:
    """scripts/train.py dist=fsdp: built on the meta device (dist.meta_init=auto) or whole (false), the same run."""
    recipe = [*RUNS[model], "dist=fsdp", "dist.nproc=2", "trainer.max_steps=3", "trainer.max_epochs=1", "logger=none"]
    recipe += ["trainer.peak_flops=1e12"]  # the FLOP count runs on the meta model too
    on_meta, whole = train(*recipe), train(*recipe, "dist.meta_init=false")
    a, b = on_meta.weights(), whole.weights()
    assert list(a) == list(b) and all(torch.equal(a[key], b[key]) for key in a)

    def started(run) -> list[str]:
        return re.findall(r"(?:parameters: |FLOPs per sample ).*", run.output)

    assert len(started(on_meta)) == 2 and started(on_meta) == started(whole)
    # the same table; torchinfo's input size is the size of the example's storage, which a meta tensor has none of
    # (and a CPU one is the whole batch's: the example is a view of its first 2 samples)
    assert _table(on_meta) == _table(whole)


def _table(run) -> list[str]:
    lines = (run.dir / "model_summary.txt").read_text().splitlines()
    return [line for line in lines if not line.startswith(("Input size", "Estimated Total Size"))]


def test_meta_init_true_refuses_a_model_it_cannot_replay_in_one_line_before_any_write(tmp_path) -> None:
    run_dir = tmp_path / "refused"
    proc = run_script(
        "train.py", f"hydra.run.dir={run_dir}", "dist=fsdp", "dist.meta_init=true", "model.init_from=best.pt"
    )
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        "error: dist.meta_init=true cannot build this model on the meta device: model.init_from loads weights while "
        "the model is built; set dist.meta_init=auto (or false) to build the whole model on every rank before "
        "sharding it"
    ]
    assert not run_dir.exists()
