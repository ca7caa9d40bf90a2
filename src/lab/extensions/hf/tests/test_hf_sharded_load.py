"""model=hf's meta-device build for dist=fsdp, in one process: weights split over several safetensors files (an
index) read into the meta-built model equal from_pretrained's; what cannot be read so (pytorch_model.bin, a new
head, resized embeddings) falls back to the whole build with one log line, or is refused under dist.meta_init=true."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import tiny
import torch

from lab.config import options
from lab.distributed import meta_init
from lab.errors import UserError
from lab.extensions.hf.sharded_load import weight_files
from lab.models.common import build as build_model

pytest.importorskip("transformers")
pytest.importorskip("peft")

V = len(tiny.VOCAB)  # the tiny models' vocabulary
TOKENS = {"input_shape": [8], "num_outputs": V, "vocab_size": V, "block_size": 8, "pad_token_id": 0}
CLASSES = {"input_shape": [8], "num_outputs": 3, "num_classes": 3, "vocab_size": V, "pad_token_id": 0}
AUTO, TRUE = SimpleNamespace(meta_init="auto"), SimpleNamespace(meta_init=True)


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    """The tiny Llama saved in parts (an index over several safetensors files) and as pytorch_model.bin only."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("llamas")
    network = AutoModelForCausalLM.from_pretrained(tiny.llama_dir(folder / "llama"))
    network.save_pretrained(folder / "parts", max_shard_size="20KB")
    (folder / "bin").mkdir()
    network.config.save_pretrained(folder / "bin")
    torch.save(network.state_dict(), folder / "bin" / "pytorch_model.bin")
    return folder


def test_weights_in_parts_are_read_into_the_meta_built_model_as_from_pretrained_loads_them(llamas):
    cfg = {"name": "hf", "name_or_path": str(llamas / "parts"), "lora": {"r": 2}}
    assert len(set(weight_files(cfg["name_or_path"], None).values())) > 1  # the index names several files
    torch.manual_seed(3)
    start = torch.random.get_rng_state()
    model = meta_init.build(cfg, TOKENS, TRUE)
    assert model is not None and all(p.is_meta for p in model.parameters())
    options.instantiate("model", cfg).materialise(model, torch.device("cpu"), start)  # one process: nothing sharded
    after = torch.random.get_rng_state()
    torch.manual_seed(3)
    whole = build_model(cfg, TOKENS)
    assert torch.equal(after, torch.random.get_rng_state())  # the generator is left where the whole build leaves it
    expected, got = whole.state_dict(), model.state_dict()
    assert list(got) == list(expected) and all(torch.equal(got[k], expected[k]) for k in expected)
    buffers = dict(model.named_buffers())
    assert all(torch.equal(buffers[name], b) for name, b in whole.named_buffers())  # rotary inv_freq


@pytest.mark.parametrize(
    ("folder", "meta", "why"),
    [
        ("bin", TOKENS, "has no *.safetensors weights (pytorch_model.bin?)"),
        ("llama", CLASSES, "score.weight is not in model.name_or_path="),  # a new head, drawn at random
        (
            "llama",
            {**TOKENS, "vocab_size": V + 2},
            f"embed_tokens.weight is [{V + 2}, 32] in the model but [{V}, 32] in its",
        ),
    ],
)
def test_what_the_files_cannot_give_is_built_whole_with_a_log_line_or_refused(llamas, caplog, folder, meta, why):
    cfg = {"name": "hf", "name_or_path": str(llamas / folder)}
    with caplog.at_level(logging.INFO, logger="lab.distributed.meta_init"):
        assert meta_init.build(cfg, meta, AUTO) is None
    assert "the whole model is built on every rank before sharding" in caplog.text and why in caplog.text
    with pytest.raises(UserError, match=r"dist\.meta_init=true cannot build this model on the meta device"):
        meta_init.build(cfg, meta, TRUE)
