"""data.streaming=true (streaming.py): a batch is a function of (seed, epoch, rank, batch number) alone, so a fresh
reader (a resumed run, another worker) gives the batches an uninterrupted one gave; the ranks' parts do not overlap;
a part that ends starts again; validation is the stream's first rows, skipped by training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.errors import ConfigError
from lab.extensions.hf.options import HfDataConfig
from lab.extensions.hf.tests.tiny import WORDS, tokenizer_dir


def _corpus(path: Path, rows: int) -> Path:
    # row i spells i in base len(WORDS), so no two rows are alike
    texts = [" ".join(WORDS[i // len(WORDS) ** k % len(WORDS)] for k in range(3)) for i in range(rows)]
    path.write_text("".join(json.dumps({"n": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def _cfg(tmp_path: Path, **keys) -> HfDataConfig:
    tokenizer_dir(tmp_path / "tok")
    settings = {
        "data_files": str(_corpus(tmp_path / "c.jsonl", 200)),
        "tokenizer": str(tmp_path / "tok"),
        "text_column": "text",
        "target_type": "tokens",
        "streaming": True,
        "examples_per_epoch": 48,
        "eval_examples": 10,
        "shuffle_buffer": 16,
        "stream_shards": 2,
        "batch_size": 4,
        "block_size": 4,
        **keys,
    }
    return HfDataConfig(name="hf", **settings)


def _epoch(train, rank: int, world: int, epoch: int, first: int = 0) -> list[list[int]]:
    order = train.train_sampler(rank, world, seed=3)
    order.set_epoch(epoch)
    indices = list(order)
    size = train.cfg.batch_size
    batches = [indices[b : b + size] for b in range(first * size, len(indices), size)]
    return [[x["input_ids"].tolist() for x, _ in train.__getitems__(batch)] for batch in batches]


def test_a_fresh_reader_resumes_every_batch_exactly(tmp_path: Path) -> None:
    module = _cfg(tmp_path).build()
    straight = _epoch(module.train, 0, 2, epoch=1)
    assert len(straight) == 48 // 2 // 4 and straight != _epoch(module.train, 0, 2, epoch=2)  # reshuffled
    resumed = _cfg(tmp_path).build().train  # another process: no reader open
    assert _epoch(resumed, 0, 2, epoch=1, first=3) == straight[3:]


def test_the_ranks_read_different_rows(tmp_path: Path) -> None:
    train = _cfg(tmp_path, text_column=None, prompt_column="text", response_column="text").build().train
    ours, theirs = ({tuple(x) for batch in _epoch(train, rank, 2, epoch=0) for x in batch} for rank in (0, 1))
    assert len(ours) == len(theirs) == 24 and not ours & theirs


def test_validation_is_the_first_rows_and_training_skips_them(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, text_column=None, prompt_column="text", response_column="text", examples_per_epoch=400)
    module = cfg.build()
    assert len(module.val) == 10 and module.meta["task"] == "causal_lm"
    # 400 items a rank of 190 rows: each part restarts; no training item is one of the first 10 rows
    seen = {tuple(x) for batch in _epoch(module.train, 0, 1, epoch=0) for x in batch}
    held = {tuple(module.val.table[i]["input_ids"].tolist()) for i in range(10)}
    assert len(seen) == 190 and not seen & held


def test_streaming_needs_an_epoch_length_and_class_labels(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs data\.examples_per_epoch"):
        _cfg(tmp_path, examples_per_epoch=None).build()
    with pytest.raises(ConfigError, match=r"needs data\.label_column='n' to be a ClassLabel"):
        _cfg(tmp_path, target_type="class", label_column="n").build()
