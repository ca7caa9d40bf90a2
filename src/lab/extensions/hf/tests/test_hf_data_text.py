"""data=hf on text (text.py): local json/csv/parquet files and save_to_disk folders tokenized by a tokenizer written
here; classification batches padded per batch; causal-LM blocks packed with shifted labels; the prompt (and the
user's turns) left out of the loss; each bad input refused in one line before anything is written."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
import torch

from lab.errors import ConfigError
from lab.extensions.hf.options import HfDataConfig
from lab.extensions.hf.tests.tiny import hub_cache, tokenizer, tokenizer_dir, write_jsonl

REVIEWS = [("the movie was good", "pos"), ("a film is awful", "neg"), ("good", "pos"), ("the film was bad", "neg")] * 6


def _cfg(tmp_path: Path, **keys) -> HfDataConfig:
    keys = {"tokenizer": str(tmp_path / "tok"), "cache_dir": str(tmp_path / "cache"), "target_type": "class", **keys}
    return HfDataConfig(name="hf", **keys)


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    return tokenizer_dir(tmp_path / "tok")


def test_classification_rows_are_the_tokenizers_ids_padded_per_batch(tmp_path: Path, tok: Path) -> None:
    files = write_jsonl(tmp_path / "reviews.jsonl", [{"review": t, "sentiment": s} for t, s in REVIEWS])
    cfg = _cfg(tmp_path, data_files=str(files), text_column="review", label_column="sentiment", test_fraction=0.0)
    module = cfg.build()
    meta = module.meta
    assert meta["class_names"] == ["neg", "pos"] and meta["num_classes"] == 2 and meta["task"] == "classification"
    assert meta["vocab_size"] == len(tokenizer()) and meta["pad_token_id"] == tokenizer().pad_token_id
    assert len(module.train) + len(module.val) == len(REVIEWS) and module.test is None
    table = module.train.table
    batch = module.train.__getitems__([0, 1, 2])
    longest = max(len(table[i]["input_ids"]) for i in range(3))
    for i, (inputs, target) in enumerate(batch):
        ids = table[i]["input_ids"].tolist()
        text = tokenizer().decode(ids)
        assert ids == tokenizer()(text)["input_ids"] and text in [t for t, _ in REVIEWS]
        assert int(target) == ["neg", "pos"].index(dict(REVIEWS)[text])
        assert inputs["input_ids"].shape == (longest,) and inputs["input_ids"][: len(ids)].tolist() == ids
        assert inputs["attention_mask"].tolist() == [1] * len(ids) + [0] * (longest - len(ids))
        assert (inputs["input_ids"][len(ids) :] == tokenizer().pad_token_id).all()
    collated = torch.utils.data.default_collate(batch)  # what the loaders' default collate makes of them
    assert collated[0]["input_ids"].shape == (3, longest) and collated[1].dtype == torch.long


def test_a_save_to_disk_dict_with_class_labels_and_a_split_map(tmp_path: Path, tok: Path) -> None:
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["n", "p"])})
    rows = {"text": [t for t, _ in REVIEWS], "label": [int(s == "pos") for _, s in REVIEWS]}
    whole = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": whole, "holdout": whole.select(range(4))}).save_to_disk(tmp_path / "saved")
    before = sorted(p.name for p in (tmp_path / "saved").rglob("*"))
    cfg = _cfg(tmp_path, path=str(tmp_path / "saved"), text_column="text", split_map={"val": "holdout"})
    module = cfg.build()
    assert module.meta["class_names"] == ["n", "p"] and len(module.val) == 4 and len(module.train) == len(REVIEWS)
    assert [int(y) for _, y in module.val.__getitems__(range(4))] == rows["label"][:4]
    assert sorted(p.name for p in (tmp_path / "saved").rglob("*")) == before  # nothing written next to the data
    sliced = _cfg(tmp_path, path=str(tmp_path / "saved"), text_column="text", split_map={"val": "train[:25%]"})
    assert len(sliced.build().val) == len(REVIEWS) // 4


def test_packed_blocks_are_the_joined_documents_with_next_token_labels(tmp_path: Path, tok: Path) -> None:
    texts = [t for t, _ in REVIEWS]
    datasets.Dataset.from_dict({"body": texts}).to_parquet(tmp_path / "corpus.parquet")
    cfg = _cfg(tmp_path, data_files=str(tmp_path / "corpus.parquet"), text_column="body", target_type="tokens")
    cfg.block_size, cfg.split_map = 5, {"val": "train"}
    module = cfg.build()
    assert module.meta["block_size"] == 5 and "num_classes" not in module.meta
    stream = [i for t in texts for i in [*tokenizer()(t)["input_ids"], tokenizer().eos_token_id]]
    blocks = module.val.__getitems__(range(len(module.val)))
    assert len(blocks) == (len(stream) - 1) // 5
    for n, (inputs, labels) in enumerate(blocks):
        assert inputs["input_ids"].tolist() == stream[5 * n : 5 * n + 5]
        assert labels.tolist() == stream[5 * n + 1 : 5 * n + 6]  # shifted: labels[t] follows input_ids[t]
        assert inputs["attention_mask"].tolist() == [1] * 5


def test_the_loss_is_on_the_response_only(tmp_path: Path, tok: Path) -> None:
    (tmp_path / "pairs.csv").write_text("q,a\nwhat is the film,good\nwhy,the movie was bad\n" * 4)
    cfg = _cfg(tmp_path, data_files=str(tmp_path / "pairs.csv"), prompt_column="q", response_column="a")
    cfg.target_type, cfg.split_map = "tokens", {"val": "train"}
    (inputs, labels), (inputs2, _) = cfg.build().val.__getitems__([0, 1])
    eos = tokenizer().eos_token_id
    prompt, response = tokenizer()("what is the film")["input_ids"], tokenizer()("good")["input_ids"] + [eos]
    assert inputs["input_ids"][: len(prompt) + 1].tolist() == prompt + response[:1]
    # labels[t] = input t+1: -100 while the next token is still the prompt, then the response and eos
    assert labels.tolist()[: len(prompt) + 1] == [-100] * (len(prompt) - 1) + response
    assert (labels[len(prompt) + 1 :] == -100).all()  # padding to the batch's longer second pair
    assert inputs2["attention_mask"].sum() == len(inputs2["input_ids"])


def test_chat_messages_learn_the_assistants_turns(tmp_path: Path) -> None:
    tokenizer_dir(tmp_path / "tok", chat=True)
    talk = [
        {"role": "user", "content": "what is the film"},
        {"role": "assistant", "content": "good"},
        {"role": "user", "content": "why"},
        {"role": "assistant", "content": "the movie was good"},
    ]
    files = write_jsonl(tmp_path / "chat.jsonl", [{"messages": talk}] * 8)
    cfg = _cfg(tmp_path, data_files=str(files), messages_column="messages", target_type="tokens")
    cfg.split_map = {"val": "train"}
    ((inputs, labels),) = cfg.build().val.__getitems__([0])
    vocab = tokenizer().convert_ids_to_tokens
    learned = [vocab(int(t)) for t in labels if t != -100]
    assert learned == ["good", "the", "movie", "was", "good"]  # the assistant's words; the roles are the template's
    shown = "user what is the film assistant good user why assistant the movie was"  # the last token only a label
    assert vocab(inputs["input_ids"].tolist()) == shown.split(" ")


def test_a_hub_dataset_by_name_is_read_offline_from_the_cache(tmp_path: Path, tok: Path, monkeypatch) -> None:
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    hub_cache(tmp_path / "cache", "someone/reviews", [{"text": t, "label": s} for t, s in REVIEWS])
    module = _cfg(tmp_path, dataset="someone/reviews", text_column="text", test_fraction=0.0).build()
    assert module.meta["class_names"] == ["neg", "pos"] and len(module.train) + len(module.val) == len(REVIEWS)


def _missing_column(tmp_path: Path) -> tuple[HfDataConfig, str]:
    files = write_jsonl(tmp_path / "r.jsonl", [{"review": t, "sentiment": s} for t, s in REVIEWS])
    cfg = _cfg(tmp_path, data_files=str(files), text_column="text", label_column="sentiment")
    return cfg, r"column 'text' \(data.text_column\) is not in the train split of .*; its columns: review, sentiment"


def _no_pad(tmp_path: Path) -> tuple[HfDataConfig, str]:
    tokenizer_dir(tmp_path / "tok", pad=False)
    cfg, _ = _missing_column(tmp_path)
    return cfg, r"has no padding token, .*set tokenizer.pad_token in its files, or data.pad_token=eos"


def _no_template(tmp_path: Path) -> tuple[HfDataConfig, str]:
    cfg = _cfg(tmp_path, data_files=str(tmp_path / "c.jsonl"), messages_column="m", target_type="tokens")
    return cfg, "is rendered by the tokenizer's chat template; .* has none"


def _no_tokenizer(tmp_path: Path) -> tuple[HfDataConfig, str]:
    cfg, _ = _missing_column(tmp_path)
    cfg.tokenizer = None
    return cfg, r"needs a tokenizer: set data.tokenizer="


def _uncached_hub_dataset(tmp_path: Path) -> tuple[HfDataConfig, str]:
    cfg = _cfg(tmp_path, dataset="nobody/no-such-set", text_column="text")
    return cfg, r"data.dataset=nobody/no-such-set: not in the datasets cache \(.*\).*run `python -c .*load_dataset"


@pytest.mark.parametrize("case", [_missing_column, _no_pad, _no_template, _no_tokenizer, _uncached_hub_dataset])
def test_bad_input_is_one_line_before_anything_is_written(tmp_path: Path, tok: Path, monkeypatch, case) -> None:
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # this machine has no network either way
    cfg, match = case(tmp_path)
    with pytest.raises(ConfigError, match=match) as caught:
        cfg.build()
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "cache" / "lab_tokenized").exists()
