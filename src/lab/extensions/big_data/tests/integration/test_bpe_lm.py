"""data=tokens through the language-model workflows, in process: train on the shared prepared token files, then eval
and infer from the checkpoint alone (its data_meta holds the tokenizer): the numbers eval reproduces, the prompt
infer continues.

The page's (README.md here) GPT commands, each checked on a small corpus instead of the standard library's 4.7 MB of
tokens written into this work tree's data/:
    python scripts/prepare_data.py experiment=bpe_lm   the fixture prepared_tokens (tests/conftest.py) runs the script
    python scripts/train.py experiment=bpe_lm          the training below (a tiny GPT), then eval and infer
"""

from __future__ import annotations

import json

import pytest
import torch

from lab.config import validate
from lab.data.text import decode, encode
from lab.workflows import evaluate, infer, train

TINY = ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.dropout=0", "data.block_size=16"]


def test_train_eval_infer_on_prepared_tokens(tmp_path, compose, prepared_tokens):
    cfg = compose(
        ["experiment=bpe_lm", *prepared_tokens, *TINY, "logger=none", "trainer.max_epochs=1", "task.sample_tokens=8"]
    )
    validate(cfg)
    train.run(cfg, tmp_path / "train")
    best = tmp_path / "train/checkpoints/best.pt"
    ckpt = torch.load(best, weights_only=True)
    meta = ckpt["data_meta"]
    assert meta["level"] == "bpe" and meta["vocab_size"] == 320 and ckpt["config"]["data"]["name"] == "tokens"

    eval_cfg = compose([f"ckpt_path={best}", "eval.split=val", "logger=none"], config_name="eval")
    evaluate.run(eval_cfg, tmp_path / "eval")
    report = json.loads((tmp_path / "eval/eval.json").read_text())
    logged = [json.loads(line) for line in (tmp_path / "train/metrics.jsonl").read_text().splitlines()]
    val = next(row for row in logged if "val/loss" in row and row["step"] == ckpt["progress"]["global_step"])
    assert report["metrics"]["loss"] == pytest.approx(val["val/loss"], rel=1e-6)
    assert (tmp_path / "eval/samples.txt").read_text().startswith("--- prompt 'def '")

    texts = []
    for run in ("a", "b"):
        infer_cfg = compose(
            [f"ckpt_path={best}", "prompt='def '", "infer.max_new_tokens=12", "logger=none"], config_name="infer"
        )
        infer.run(infer_cfg, tmp_path / run)
        record = json.loads((tmp_path / run / "predictions.json").read_text())["predictions"][0]
        assert record["prompt"] == "def " and record["tokens"] == 12
        texts.append(record["text"])
    assert texts[0] == texts[1] and texts[0]  # seeded sampling: the same continuation twice
    assert decode(encode(texts[0], meta), meta) == texts[0]  # BPE text that the tokenizer reads back
