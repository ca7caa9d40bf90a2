"""The page's commands, which need a hub model, your data files or a run of yours: each train line composed and
checked as a run checks it before it starts, each export line composed and checked, and the export's refusals
(tests/integration/test_hf_model_train.py trains, evaluates and exports tiny models)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from torch import nn

from lab.config import validate
from lab.errors import ConfigError
from lab.extensions.hf import export

PAGE = Path(__file__).resolve().parents[1] / "README.md"
TRAIN = [
    (
        "python scripts/train.py model=hf model.name_or_path=google-bert/bert-base-uncased task=classification data=hf data.data_files=/data/reviews.jsonl data.text_column=text data.label_column=label",  # noqa: E501
        {"model.kind": "auto", "model.lora.r": None, "model.dtype": "float32", "task.name": "classification"},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=/path/to/a/saved/model model.dtype=bfloat16 model.grad_checkpointing=true task=classification data=hf data.data_files=/data/reviews.jsonl data.text_column=text data.label_column=label",  # noqa: E501
        {"model.dtype": "bfloat16", "model.grad_checkpointing": True},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=HuggingFaceTB/SmolLM2-135M model.revision=main task=language_model data=hf data.data_files=/data/corpus.jsonl data.text_column=text",  # noqa: E501
        {"model.revision": "main", "task.name": "language_model"},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=google-bert/bert-base-uncased model.lora.r=8 task=classification data=hf data.data_files=/data/reviews.jsonl data.text_column=text data.label_column=label",  # noqa: E501
        {"model.lora.r": 8, "model.lora.alpha": 16, "model.lora.target_modules": None},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=HuggingFaceTB/SmolLM2-135M model.lora.r=16 model.lora.alpha=32 model.lora.dropout=0.05 'model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj]' task=language_model data=hf data.data_files=/data/corpus.jsonl data.text_column=text",  # noqa: E501
        {"model.lora.r": 16, "model.lora.alpha": 32, "model.lora.dropout": 0.05,
         "model.lora.target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    ),
]  # fmt: skip
INFER = "python scripts/infer.py ckpt_path=outputs/train/<run>/checkpoints/best.pt input=reviews.txt infer.top_k=2"
EXPORT = [
    "python scripts/export.py ckpt_path=outputs/train/<run>/checkpoints/best.pt export.formats=[hf]",
    "python scripts/export.py ckpt_path=outputs/train/<run>/checkpoints/best.pt export.formats=[hf] export.hf.merge_lora=false",  # noqa: E501
]


@pytest.mark.parametrize(("command", "expected"), TRAIN, ids=[str(i) for i in range(len(TRAIN))])
def test_the_pages_train_commands_compose_and_validate(compose, command, expected):
    assert command in PAGE.read_text(), command
    python, script, *overrides = shlex.split(command)
    assert (python, script) == ("python", "scripts/train.py")
    cfg = compose(overrides)
    validate(cfg)
    for key, value in expected.items():
        node = OmegaConf.select(cfg, key)
        assert (OmegaConf.to_container(node) if OmegaConf.is_config(node) else node) == value, key


@pytest.mark.parametrize("command", EXPORT)
def test_the_pages_export_commands_compose_and_validate(compose, command):
    assert command in PAGE.read_text(), command
    python, script, *overrides = shlex.split(command.replace("<run>", "2026-01-02_03-04-05_000006"))
    assert (python, script) == ("python", "scripts/export.py")
    cfg = compose(overrides, config_name="export")
    validate(cfg)
    assert (list(cfg.export.formats), cfg.export.hf.merge_lora) == (["hf"], "merge_lora=false" not in command)


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["export.formats=[hf,onnx]"], "export.formats=hf is written alone: export ['hf', 'onnx'] in separate runs"),
        (["export.hf.merge_lora=false"], "export.hf.merge_lora=false sets how export.formats=[hf] writes LoRA"),
    ],
)
def test_an_hf_export_mixed_with_other_formats_or_merge_lora_without_it_is_refused(compose, overrides, refusal):
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        validate(compose(["ckpt_path=x.pt", *overrides], config_name="export"))


def test_an_hf_export_of_another_model_is_refused_before_writing(tmp_path):
    restored = SimpleNamespace(model=nn.Linear(2, 2), path=tmp_path / "best.pt", config={"model": {"name": "mlp"}})
    assert export.refusal(restored, merge_lora=True) == (
        f"export.formats=[hf] takes a model=hf checkpoint; {tmp_path / 'best.pt'} has model=mlp"
    )


def test_the_pages_infer_command_composes(compose):
    assert INFER in PAGE.read_text()
    python, script, *overrides = shlex.split(INFER.replace("<run>", "2026-01-02_03-04-05_000006"))
    assert (python, script) == ("python", "scripts/infer.py")
    cfg = compose(overrides, config_name="infer")
    assert (cfg.input, cfg.infer.top_k) == ("reviews.txt", 2)


@pytest.mark.parametrize(("precision", "refused"), [("fp16", True), ("bf16", False), ("fp32", False)])
def test_bfloat16_weights_with_float16_autocast_are_refused_in_one_line(compose, precision, refused):
    cfg = compose(["model=hf", "model.name_or_path=/models/tiny", "model.dtype=bfloat16", f"precision={precision}"])
    if not refused:
        validate(cfg)
        return
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    assert str(caught.value) == (
        "model.dtype=bfloat16 cannot train with precision=fp16 (float16 autocast and its loss scaler): use "
        "precision=bf16, or model.dtype=float32"
    )
