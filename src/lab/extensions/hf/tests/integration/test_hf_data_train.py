"""data=hf text batches through the core tasks, in process, with a test-only model (token_bag.py): a classifier and
a causal LM on prompt/response pairs (the loss on the response only) train, and eval.py reproduces its figures."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from helpers import forget_option
from lab.config import validate
from lab.extensions.hf.tests.tiny import tokenizer_dir
from lab.workflows import evaluate, train


@pytest.fixture(autouse=True, scope="module")
def _token_bag():
    """model=token_bag for this module's runs only: later tests in this process see the shipped models alone."""
    from lab.extensions.hf.tests.integration import token_bag  # defining the class registers model=token_bag

    yield
    forget_option(token_bag.TokenBag)


TEXTS = ["the movie was good", "a film is awful", "good", "the film was bad", "what is the film", "why"]


def _run(compose, tmp_path: Path, *overrides: str) -> dict:
    tokenizer_dir(tmp_path / "tok")
    cfg = compose(
        [
            "data=hf",
            "model=token_bag",
            f"data.tokenizer={tmp_path / 'tok'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "data.batch_size=4",
            "trainer.max_epochs=2",
            "logger=none",
            *overrides,
        ]
    )
    validate(cfg)
    train.run(cfg, tmp_path / "run")
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_a_text_classifier_trains_on_padded_batches(compose, tmp_path: Path) -> None:
    rows = [{"text": t, "label": ["neg", "pos"][i % 2]} for i, t in enumerate(TEXTS * 8)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = _run(compose, tmp_path, f"data.data_files={tmp_path / 'r.jsonl'}", "data.text_column=text")
    assert summary["status"] == "completed" and 0 <= summary["val/acc"] <= 1
    meta = torch.load(tmp_path / "run/checkpoints/best.pt", weights_only=True)["data_meta"]
    assert meta["class_names"] == ["neg", "pos"] and meta["tokenizer"] == str(tmp_path / "tok")


def test_a_causal_lm_counts_the_response_tokens_only(compose, tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_text("q,a\n" + "".join(f"{t},{u}\n" for t, u in itertools.pairwise(TEXTS)) * 4)
    summary = _run(
        compose,
        tmp_path,
        f"data.data_files={tmp_path / 'p.csv'}",
        "data.prompt_column=q",
        "data.response_column=a",
        "task=language_model",
    )
    assert summary["status"] == "completed" and math.isfinite(summary["val/loss"])
    assert summary["val/perplexity"] == math.exp(summary["val/loss"])
    # eval.py rebuilds the tokenized data from the checkpoint and scores it as validation did; its sample prompts
    # are spelt by the run's tokenizer (data=hf's text_codec), and this word-level one knows none of them
    best = tmp_path / "run/checkpoints/best.pt"
    evaluate.run(compose([f"ckpt_path={best}", "eval.split=val", "logger=none"], config_name="eval"), tmp_path / "e")
    report = json.loads((tmp_path / "e/eval.json").read_text())
    assert report["metrics"]["loss"] == summary["val/loss"] and report["samples"] == []
