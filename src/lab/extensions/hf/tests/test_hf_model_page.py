"""The page's commands, which need a hub model, a dataset of tokens or a run of yours: each train line composed and
checked as a run checks it before it starts, each export line parsed by the command and refused in one line for a
checkpoint that is not there (tests/integration/test_hf_model_train.py trains, evaluates and exports tiny models)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lab.config import validate
from lab.errors import UserError
from lab.extensions.hf import export

PAGE = Path(__file__).resolve().parents[1] / "README.md"
DATA = " <data options>"  # the data side's dataset of tokens, not this page's
TRAIN = [
    (
        "python scripts/train.py model=hf model.name_or_path=google-bert/bert-base-uncased task=classification <data options>",  # noqa: E501
        {"model.kind": "auto", "model.lora.r": None, "model.dtype": "float32", "task.name": "classification"},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=/path/to/a/saved/model model.dtype=bfloat16 model.grad_checkpointing=true task=classification <data options>",  # noqa: E501
        {"model.dtype": "bfloat16", "model.grad_checkpointing": True},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=HuggingFaceTB/SmolLM2-135M model.revision=main task=language_model <data options>",  # noqa: E501
        {"model.revision": "main", "task.name": "language_model"},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=google-bert/bert-base-uncased model.lora.r=8 task=classification <data options>",  # noqa: E501
        {"model.lora.r": 8, "model.lora.alpha": 16, "model.lora.target_modules": None},
    ),
    (
        "python scripts/train.py model=hf model.name_or_path=HuggingFaceTB/SmolLM2-135M model.lora.r=16 model.lora.alpha=32 model.lora.dropout=0.05 'model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj]' task=language_model <data options>",  # noqa: E501
        {"model.lora.r": 16, "model.lora.alpha": 32, "model.lora.dropout": 0.05,
         "model.lora.target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    ),
]  # fmt: skip
INFER = "python scripts/infer.py ckpt_path=outputs/train/<run>/checkpoints/best.pt input=reviews.txt infer.top_k=2"
EXPORT = [
    "python -m lab.extensions.hf.export outputs/train/<run>/checkpoints/best.pt exported/my-model",
    "python -m lab.extensions.hf.export outputs/train/<run>/checkpoints/best.pt exported/my-adapter --adapter",
]


@pytest.mark.parametrize(("command", "expected"), TRAIN, ids=[str(i) for i in range(len(TRAIN))])
def test_the_pages_train_commands_compose_and_validate(compose, command, expected):
    assert command in PAGE.read_text(), command
    python, script, *overrides = shlex.split(command.removesuffix(DATA))
    assert (python, script) == ("python", "scripts/train.py")
    cfg = compose(overrides)
    validate(cfg)
    for key, value in expected.items():
        node = OmegaConf.select(cfg, key)
        assert (OmegaConf.to_container(node) if OmegaConf.is_config(node) else node) == value, key


@pytest.mark.parametrize("command", EXPORT)
def test_the_pages_export_commands_parse_and_refuse_a_missing_checkpoint(command, tmp_path, monkeypatch):
    assert command in PAGE.read_text(), command
    python, flag, module, *argv = shlex.split(command)
    assert (python, flag, module) == ("python", "-m", "lab.extensions.hf.export")
    args = export.parser().parse_args(argv)
    assert args.adapter == ("--adapter" in argv)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"best\.pt"):
        export.export(args.checkpoint, args.directory, args.adapter)
    assert not (tmp_path / "exported").exists()


def test_the_pages_infer_command_composes(compose):
    assert INFER in PAGE.read_text()
    python, script, *overrides = shlex.split(INFER.replace("<run>", "2026-01-02_03-04-05_000006"))
    assert (python, script) == ("python", "scripts/infer.py")
    cfg = compose(overrides, config_name="infer")
    assert (cfg.input, cfg.infer.top_k) == ("reviews.txt", 2)
