"""model=hf in one process: tiny BERT and Llama directories written by the test (tiny.py), built for classification
and causal LM, whole or with LoRA; the seams the core asks of a model (head, layer groups, FSDP units, the
architecture a checkpoint rebuilds); the offline-first lookup and its one-line refusal."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import tiny
import torch

from lab.checkpointing import load_model_state, storage
from lab.errors import ConfigError, UserError
from lab.extensions.hf import hub
from lab.extensions.hf.options import HfModelConfig, LoraSettings
from lab.models.common import build as build_model

pytest.importorskip("transformers")
pytest.importorskip("peft")

V = len(tiny.VOCAB)  # the tiny models' vocabulary
CLASSES = {"input_shape": [8], "num_outputs": 3, "num_classes": 3, "vocab_size": V, "pad_token_id": 0}
TOKENS = {"input_shape": [8], "num_outputs": V, "vocab_size": V, "block_size": 8, "pad_token_id": 0}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return str(tiny.bert_dir(tmp_path_factory.mktemp("bert")))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return str(tiny.llama_dir(tmp_path_factory.mktemp("llama")))


def batch(rows: int = 2, length: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, V, (rows, length), generator=torch.Generator().manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def trainable(model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.requires_grad]


def test_classification_gets_a_head_for_the_data_classes(bert):
    option = HfModelConfig(name_or_path=bert)
    model = build_model(option, CLASSES)
    assert model(batch()).shape == (2, 3)
    assert option.head(model).out_features == 3
    assert len(trainable(model)) == len(list(model.parameters()))  # no LoRA: everything trains
    assert [type(unit).__name__ for unit in option.fsdp_units(model)].count("BertLayer") == 2


def test_a_causal_lm_takes_a_dict_or_the_token_ids(llama):
    option = HfModelConfig(name_or_path=llama)
    model = build_model(option, TOKENS).eval()
    inputs = batch()
    with torch.no_grad():
        logits = model(inputs)
        assert logits.shape == (2, 8, V)
        assert torch.equal(model(inputs["input_ids"]), logits)  # how the LM task continues a prompt
    units = option.fsdp_units(model)
    assert [type(unit).__name__ for unit in units] == ["LlamaDecoderLayer"] * 2
    groups = option.layer_groups(model)
    assert groups[0] == ["network.model.embed_tokens.weight"]
    assert groups[1] == [n for n, _ in units[0].named_parameters(prefix="network.model.layers.0")]
    assert "network.lm_head.weight" in groups[-1] and "network.model.norm.weight" in groups[-1]


def test_kind_follows_the_data_unless_set(bert, llama):
    assert build_model(HfModelConfig(name_or_path=llama, kind="sequence_classification"), CLASSES)(batch()).shape == (
        2,
        3,
    )
    with pytest.raises(ConfigError, match="model=hf takes token data"):
        build_model(HfModelConfig(name_or_path=bert), {"input_shape": [3, 8, 8], "num_outputs": 2})


def test_lora_trains_the_adapter_and_the_new_head_only(bert):
    option = HfModelConfig(name_or_path=bert, lora=LoraSettings(r=4, alpha=8))
    model = build_model(option, CLASSES)
    names = trainable(model)
    assert names and all("lora_" in n or "classifier" in n for n in names)
    assert {n.split(".")[-4] for n in names if "lora_A" in n} == {"query", "value"}  # PEFT's default for BERT
    assert option.head(model).out_features == 3 and all(p.requires_grad for p in option.head(model).parameters())
    full = sum(p.numel() for p in build_model(HfModelConfig(name_or_path=bert), CLASSES).parameters())
    assert sum(p.numel() for n, p in model.named_parameters() if n in names) < full / 10


def test_lora_target_modules_and_a_causal_lm(llama):
    option = HfModelConfig(name_or_path=llama, lora=LoraSettings(r=2, target_modules=["q_proj", "k_proj", "o_proj"]))
    model = build_model(option, TOKENS)
    wrapped = {n.split(".")[-4] for n in trainable(model)}
    assert wrapped == {"q_proj", "k_proj", "o_proj"}
    assert model(batch()).shape == (2, 8, V)


def test_lora_off_when_r_or_the_node_is_null(bert):
    for lora in (None, LoraSettings(r=None)):
        assert all(
            p.requires_grad for p in build_model(HfModelConfig(name_or_path=bert, lora=lora), CLASSES).parameters()
        )


def test_bad_values_are_refused_in_one_line(bert):
    with pytest.raises(ConfigError, match=r"model\.kind"):
        HfModelConfig(name_or_path=bert, kind="seq2seq")
    with pytest.raises(ConfigError, match=r"model\.dtype"):
        HfModelConfig(name_or_path=bert, dtype="int8")
    with pytest.raises(ConfigError, match=r"model\.lora\.r must be >= 1"):
        HfModelConfig(name_or_path=bert, lora=LoraSettings(r=0))
    with pytest.raises(ConfigError, match=r"model\.lora: PEFT could not wrap the model"):
        build_model(HfModelConfig(name_or_path=bert, lora=LoraSettings(r=2, target_modules=["nope"])), CLASSES)


def test_dtype_checkpointing_and_attention_reach_the_model(llama):
    option = HfModelConfig(name_or_path=llama, dtype="bfloat16", grad_checkpointing=True, attn_implementation="eager")
    model = build_model(option, TOKENS)
    network = model.network
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert network.is_activation_checkpointing and network.config._attn_implementation == "eager"
    model.train()
    model(batch()).float().sum().backward()  # recomputed blocks still give every weight its gradient
    assert all(p.grad is not None for p in model.parameters())


def test_a_checkpoint_without_lora_rebuilds_the_architecture_without_the_weights(bert):
    option = HfModelConfig(name_or_path=bert)
    trained = build_model(option, CLASSES).eval()
    assert not option.for_checkpoint().pretrained
    assert option.checkpoint_state(trained, trained.state_dict()).keys() == {"model"}  # every weight, as any model
    rebuilt = build_model(option.for_checkpoint(), CLASSES).eval()
    rebuilt.load_state_dict(trained.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(batch()), trained(batch()))


def adapter_checkpoint(option: HfModelConfig) -> tuple[torch.nn.Module, dict]:
    """Return a LoRA model whose trainable weights moved off their start (as training moves them) and a
    checkpoint of it, as train.py writes one."""
    trained = build_model(option, CLASSES).eval()
    with torch.no_grad():
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(0.1)
    ckpt = {"config": {"model": dataclasses.asdict(option), "data": {}}, "data_meta": CLASSES}
    return trained, ckpt | option.checkpoint_state(trained, trained.state_dict())


def test_a_lora_checkpoint_holds_the_adapter_and_its_base_and_loads_over_the_base(bert):
    option = HfModelConfig(name_or_path=bert, lora=LoraSettings(r=4))
    trained, ckpt = adapter_checkpoint(option)
    kept = set(ckpt["model"])
    # what trains, and the head as first drawn (PEFT keeps it beside the copy that trains): none came from the files
    head = {f"network.base_model.model.classifier.original_module.{p}" for p in ("weight", "bias")}
    assert kept == set(trainable(trained)) | head and all("lora_" in k or ".classifier." in k for k in kept)
    assert len(kept) < len(trained.state_dict()) and not any(".base_layer." in k for k in kept)  # no base weight
    assert ckpt["model_base"]["name_or_path"] == bert and ckpt["model_base"]["revision"] is None  # a directory
    rebuilt_option = option.for_checkpoint()
    assert rebuilt_option.pretrained  # the base is read again from its files
    rebuilt = build_model(rebuilt_option, CLASSES).eval()
    load_model_state(rebuilt, rebuilt_option.restore_state(rebuilt, ckpt))
    with torch.no_grad():
        assert torch.equal(rebuilt(batch()), trained(batch()))
    lost = {**ckpt, "model": {k: v for k, v in ckpt["model"].items() if "lora_A" not in k}}
    with pytest.raises(UserError, match=r"missing keys .*lora_A"):  # the adapter's keys still load strictly
        load_model_state(rebuilt, rebuilt_option.restore_state(rebuilt, lost))


def test_a_lora_checkpoint_refuses_a_changed_base_in_one_line_before_writing(bert, tmp_path):
    from safetensors.torch import load_file, save_file

    from lab.workflows import restore

    base = tmp_path / "base"
    shutil.copytree(bert, base)
    option = HfModelConfig(name_or_path=str(base), lora=LoraSettings(r=4))
    _, ckpt = adapter_checkpoint(option)
    storage.save(tmp_path / "best.pt", ckpt)
    assert isinstance(restore.rebuild(tmp_path / "best.pt").model, torch.nn.Module)  # the same base loads
    weights = load_file(base / "model.safetensors")
    weights["embeddings.word_embeddings.weight"] += 1  # another model now at that path
    save_file(weights, base / "model.safetensors", metadata={"format": "pt"})
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(UserError) as refused:
        restore.rebuild(tmp_path / "best.pt")
    line, recorded = str(refused.value), ckpt["model_base"]["fingerprint"]
    assert "\n" not in line and f"base model {base}" in line and recorded in line and "now holds other weights" in line
    assert sorted(tmp_path.rglob("*")) == before


def test_freeze_and_init_from_work_as_for_every_model(bert, tmp_path):
    option = HfModelConfig(name_or_path=bert, freeze=["backbone"])
    model = build_model(option, CLASSES)
    assert trainable(model) == ["network.classifier.weight", "network.classifier.bias"]
    torch.save({k: v + 1 for k, v in model.state_dict().items()}, tmp_path / "w.pt")
    started = build_model(HfModelConfig(name_or_path=bert, init_from=str(tmp_path / "w.pt")), CLASSES)
    bias = "network.classifier.bias"
    assert torch.equal(started.state_dict()[bias], model.state_dict()[bias] + 1)


def test_a_hub_id_is_read_from_the_cache_without_the_network(bert, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as refused:
        hub.locate("someone/tiny-bert")
    line = str(refused.value)
    assert "\n" not in line and str(tmp_path) in line and "`hf download someone/tiny-bert`" in line
    snapshot = tmp_path / "models--someone--tiny-bert" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--someone--tiny-bert" / "refs").mkdir()
    (tmp_path / "models--someone--tiny-bert" / "refs" / "main").write_text("0" * 40)
    assert hub.locate("someone/tiny-bert")["local_files_only"] is True
    assert hub.locate(bert) == {"pretrained_model_name_or_path": bert}  # a directory is read as it is
    with pytest.raises(UserError, match="no such directory, and not a hub id"):
        hub.locate(str(tmp_path / "moved" / "model"))


def test_a_classifier_given_token_ids_alone_masks_their_padding(bert):
    model = build_model(HfModelConfig(name_or_path=bert), CLASSES).eval()
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])  # 0 is [PAD]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    with torch.no_grad():
        assert torch.equal(model(ids), model({"input_ids": ids, "attention_mask": mask}))
        assert not torch.equal(model(ids), model({"input_ids": ids, "attention_mask": torch.ones_like(ids)}))


def test_a_checkpoint_in_its_run_dir_reads_the_run_tokenizer_and_one_copied_elsewhere_the_original(tmp_path):
    """eval/export/infer take the tokenizer the run saved beside its checkpoints (the data's rebuild too); a
    checkpoint without its run dir, or a run without a copy, keeps the original."""
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "bare" / "checkpoints").mkdir(parents=True)
    tiny.tokenizer().save_pretrained(tmp_path / "run" / hub.TOKENIZER)
    option = HfModelConfig(name_or_path="orig")
    for checkpoint, expected in (
        (tmp_path / "run" / "checkpoints" / "best.pt", str(tmp_path / "run" / hub.TOKENIZER)),
        (tmp_path / "run" / "best.pt", "orig"),  # copied out of checkpoints/
        (tmp_path / "bare" / "checkpoints" / "best.pt", "orig"),  # a run that saved no tokenizer
    ):
        config, meta = {"model": {"name_or_path": "orig"}, "data": {"tokenizer": "orig"}}, {"tokenizer": "orig"}
        option.read_with_run(checkpoint, config, meta)
        assert meta["tokenizer"] == config["data"]["tokenizer"] == expected
    config, meta = {"data": {"tokenizer": None}}, {"vocab_size": 18}  # no text tokenized: nothing to point at
    option.read_with_run(tmp_path / "run" / "checkpoints" / "best.pt", config, meta)
    assert meta == {"vocab_size": 18} and config == {"data": {"tokenizer": None}}


def test_the_run_saves_the_tokenizer_as_the_data_padded_with_it(tmp_path):
    """data.pad_token=eos pads with the end-of-sequence token: the run's copy keeps it, so infer pads lines as
    training padded batches; a tokenizer with a padding token is saved as it is, and a resumed run keeps its copy."""
    for name, pad, token in (("eos", False, "[EOS]"), ("own", True, "[PAD]")):
        tiny.tokenizer(pad=pad).save_pretrained(tmp_path / name)
        hub.save_run_tokenizer(
            {"tokenizer": str(tmp_path / name), "pad_token_id": tiny.VOCAB.index(token)}, tmp_path / name / "run"
        )
        saved = hub.load_tokenizer(str(tmp_path / name / "run" / hub.TOKENIZER))
        assert saved.pad_token == token and saved.get_vocab() == tiny.tokenizer().get_vocab()
    hub.save_run_tokenizer({"tokenizer": str(tmp_path / "own")}, tmp_path / "eos" / "run")  # resumed: kept
    assert hub.load_tokenizer(str(tmp_path / "eos" / "run" / hub.TOKENIZER)).pad_token == "[EOS]"


def test_the_ema_of_a_lora_model_is_checkpointed_as_its_adapter_and_continues_from_it(bert):
    from types import SimpleNamespace

    from lab.distributed.parallel import Parallel
    from lab.training.ema import EMA

    option = HfModelConfig(name_or_path=bert, lora=LoraSettings(r=4))
    trained, ckpt = adapter_checkpoint(option)
    trainer = SimpleNamespace(model=trained, parallel=Parallel(), state=SimpleNamespace(option=option))
    ema = EMA(trained, decay=0.5)
    with torch.no_grad():
        for p in trained.parameters():
            if p.requires_grad:
                p.add_(1.0)
    ema.update()
    ema.on_save_checkpoint(trainer, ckpt)
    assert ckpt["model"].keys() == ckpt["raw_model"].keys()  # the average, kept as the weights are
    assert not torch.equal(ckpt["model"][next(iter(ckpt["model"]))], ckpt["raw_model"][next(iter(ckpt["model"]))])
    continued = EMA(trained, decay=0.5)
    continued.on_load_checkpoint(trainer, ckpt)
    assert all(torch.equal(a, b) for a, b in zip(continued.state_dict().values(), ema.state_dict().values()))


def test_a_lora_checkpoint_names_the_cached_commit_of_a_hub_id(bert, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from lab.extensions.hf.models import base_revision

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    commit = "c0ffee" * 6 + "c0ff"
    repo = tmp_path / "models--someone--tiny-bert"
    shutil.copytree(bert, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert base_revision({"pretrained_model_name_or_path": "someone/tiny-bert"}, None) == commit  # the snapshot folder
    assert base_revision({"pretrained_model_name_or_path": "someone/tiny-bert"}, "main") == commit
    assert base_revision({"pretrained_model_name_or_path": "someone/other"}, "v1") == "v1"  # not cached: as asked
    assert base_revision({"pretrained_model_name_or_path": bert}, None) is None  # a local directory
