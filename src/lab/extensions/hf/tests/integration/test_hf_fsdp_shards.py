"""model=hf under dist=fsdp over 2 gloo ranks: built on the meta device, sharded per block, each rank reading only
its shards of the safetensors file; the gathered weights (LoRA's included) and the computed buffers equal
from_pretrained's whole build bitwise, and a LoRA checkpoint records the same base as the whole build's."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from lab.config import options
from lab.distributed import meta_init, spawning
from lab.distributed.parallel import FSDP
from lab.models.common import build as build_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tiny.py, shared with the in-process tests
import tiny

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytestmark = pytest.mark.slow

SEED = 7
TOKENS = {"input_shape": [8], "num_outputs": 18, "vocab_size": 18, "block_size": 8, "pad_token_id": 0}


def cases(llama: str) -> dict[str, dict]:
    return {
        "whole": {"name": "hf", "name_or_path": llama},
        "lora": {"name": "hf", "name_or_path": llama, "lora": {"r": 2}},
        "bf16": {"name": "hf", "name_or_path": llama, "dtype": "bfloat16"},
    }


def _state(model: torch.nn.Module, full: dict) -> dict:
    """The full weights and the buffers the file does not hold (computed at the build, not stored)."""
    buffers = {name: b.clone() for name, b in model.named_buffers() if "inv_freq" in name}
    return {"weights": full, "buffers": buffers}


@record
def _read_shards(llama: str) -> dict:
    """One rank: each case built on the meta device, sharded, its shards read; rank 0 returns the gathered weights
    and, per rank, how many elements of each parameter it holds."""
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo")
    parallel = FSDP(rank=dist.get_rank(), world_size=dist.get_world_size())
    fsdp = SimpleNamespace(strategy="fsdp", meta_init=True, sync_bn=False, reshard_after_forward=True)
    results = {}
    for case, model_cfg in cases(llama).items():
        torch.manual_seed(SEED)
        start = torch.random.get_rng_state()
        model = meta_init.build(model_cfg, TOKENS, fsdp)  # meta_init=True: refused rather than built whole
        sharded, _ = parallel.wrap(model, torch.device("cpu"), SimpleNamespace(autocast_dtype=None), model_cfg)
        option = options.instantiate("model", model_cfg)
        option.materialise(sharded, torch.device("cpu"), start)
        held = {name: (isinstance(p, DTensor), p.to_local().numel()) for name, p in sharded.named_parameters()}
        full = parallel.model_state(sharded)
        # what a checkpoint records of a LoRA run's base: its fingerprint, taken from the consolidated weights
        base = option.checkpoint_state(sharded, full).get("model_base")
        results[case] = (_state(sharded, full), parallel.gather(held), base)
    dist.destroy_process_group()
    return results


def test_two_ranks_read_their_shards_of_the_weights_from_pretrained_loads(tmp_path) -> None:
    llama = str(tiny.llama_dir(tmp_path / "llama"))
    dist_cfg = SimpleNamespace(nproc=2, master_port=None, grace_s=5, strategy="fsdp", max_restarts=0)
    results = spawning.spawn(_read_shards, (llama,), dist_cfg)
    for case, model_cfg in cases(llama).items():
        got, held, base = results[case]
        torch.manual_seed(SEED)
        whole = build_model(model_cfg, TOKENS)
        # a LoRA checkpoint saved under dist=fsdp names the base eval, export and infer build whole
        assert base == getattr(whole, "base", None), case
        expected = _state(whole, whole.state_dict())
        for part in ("weights", "buffers"):
            assert list(got[part]) == list(expected[part]), case
            for name, tensor in expected[part].items():
                assert got[part][name].dtype == tensor.dtype, f"{case}: {name}"
                assert torch.equal(got[part][name], tensor), f"{case}: {name}"
        # sharded, not replicated: each parameter is split between the two ranks
        for name, parameter in whole.named_parameters():
            assert all(rank[name][0] for rank in held), f"{case}: {name} is not a DTensor"
            assert sum(rank[name][1] for rank in held) == parameter.numel(), f"{case}: {name}"


PAGE = Path(__file__).resolve().parents[2] / "README.md"
BENCH = [
    "python -m lab.extensions.hf.bench_fsdp_memory",
    "python -m lab.extensions.hf.bench_fsdp_memory --dtype bfloat16",
]


def test_the_pages_benchmark_measures_both_ways_at_a_tiny_size(capsys) -> None:
    """The page's `bench_fsdp_memory` lines, the second at a tiny size: both ways keep the same shards, half the
    model on each rank, and the table gives each rank's peaks and the ratios."""
    from lab.extensions.hf import bench_fsdp_memory

    page = PAGE.read_text()
    assert all(f"  {line}  " in page for line in BENCH)
    bench_fsdp_memory.main(["--hidden", "64", "--layers", "2", "--vocab", "256", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("whole ", "shards "))]
    assert [row[:2] for row in rows] == [["whole", "0"], ["whole", "1"], ["shards", "0"], ["shards", "1"]]
    kept = [float(row[4]) for row in rows]
    assert kept[:2] == kept[2:] and kept[0] > 0
    assert "peak RSS ratio whole / shards" in out and "peak own ratio whole / shards" in out
