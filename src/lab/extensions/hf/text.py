"""data=hf on text: rows tokenized by the model's tokenizer into the batches model=hf takes.

- task=classification: data.text_column (and data.label_column) become ``({"input_ids", "attention_mask"},
  class index)``, each batch padded to its longest row.
- task=language_model on data.text_column: the documents joined (each ended by the tokenizer's eos) and cut into
  blocks of data.block_size tokens, ``({"input_ids", "attention_mask"}, labels)`` with labels the next tokens.
- task=language_model on data.prompt_column + data.response_column, or on data.messages_column (rendered by the
  tokenizer's chat template): one example a row, labels -100 on the prompt (and on the user's turns), so only
  the response is learned; padded per batch.

Labels are shifted here: ``labels[t]`` is the token after ``input_ids[t]``, as the core language-model task
expects. Rows are tokenized once by ``Dataset.map`` into the datasets cache (data.cache_dir, else
HF_DATASETS_CACHE), under a name that hashes the rows, the tokenizer and the settings, so a second run reads them
back. Nothing is written next to the user's data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow.compute as pc
import torch
from torch.utils.data import Dataset

from lab.data.common import DataModule, split_indices, train_val_test
from lab.data.tabular import _natural
from lab.data.text import IGNORE_INDEX
from lab.errors import ConfigError
from lab.extensions.hf import data, hub

MAP_BATCH = 1000  # rows per map call; packing drops each call's last partial block


def load_tokenizer(cfg: Any) -> Any:
    """Return data.tokenizer's tokenizer, with a padding token when the batches need one."""
    if cfg.tokenizer is None:
        raise ConfigError(
            "data=hf on text needs a tokenizer: set data.tokenizer=<hub id or local folder> (model=hf sets it to "
            "model.name_or_path)"
        )
    tokenizer = hub.load_tokenizer(cfg.tokenizer)
    packed = cfg.target_type == "tokens" and cfg.text_column is not None
    if tokenizer.pad_token is None and not packed:  # packed blocks are never padded
        if cfg.pad_token != "eos":
            raise ConfigError(
                f"data.tokenizer={cfg.tokenizer} has no padding token, which padded batches need; set "
                "tokenizer.pad_token in its files, or data.pad_token=eos to pad with its end-of-sequence token"
            )
        if tokenizer.eos_token is None:
            raise ConfigError(f"data.pad_token=eos: data.tokenizer={cfg.tokenizer} has no eos token either")
        tokenizer.pad_token = tokenizer.eos_token
    if cfg.messages_column is not None and not tokenizer.chat_template:
        raise ConfigError(
            f"data.messages_column={cfg.messages_column} is rendered by the tokenizer's chat template; "
            f"data.tokenizer={cfg.tokenizer} has none: use a chat model's tokenizer, or data.prompt_column + "
            "data.response_column"
        )
    return tokenizer


class TokenizerCodec:
    """task=language_model's prompts and samples in the run's tokenizer, as training tokenized text (no special
    tokens added)."""

    def __init__(self, tokenizer: str) -> None:
        self.tokenizer = hub.load_tokenizer(tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids)))

    def spells(self, text: str) -> bool:
        ids = self.encode(text)  # a byte-level BPE spells any text; a word-level one may give its unknown token
        return bool(ids) and self.tokenizer.unk_token_id not in ids


def kind(cfg: Any) -> str:
    """Return what the rows become: classification, packed (causal LM blocks) or supervised (prompt/response)."""
    if cfg.target_type == "class":
        if cfg.text_column is None:
            raise ConfigError(
                "task=classification on text reads data.text_column (and data.label_column); prompt/response and "
                "messages are for task=language_model"
            )
        return "classification"
    if cfg.target_type == "value":
        raise ConfigError("data=hf on text trains task=classification or task=language_model, not task=regression")
    return "packed" if cfg.text_column is not None else "supervised"


def needed_columns(cfg: Any, what: str) -> list[str]:
    if what == "classification":
        return [cfg.text_column, cfg.label_column]
    if what == "packed":
        return [cfg.text_column]
    return [cfg.messages_column] if cfg.messages_column is not None else [cfg.prompt_column, cfg.response_column]


def check_columns(cfg: Any, split: str, names: Sequence[str] | None, needed: Sequence[str]) -> None:
    """Refuse a split that lacks a column the settings name, listing the columns it has."""
    if names is None:  # a stream whose columns are not known before it is read
        return
    missing = [c for c in needed if c not in names]
    if missing:
        raise ConfigError(
            f"column {missing[0]!r} (data.{_key_of(cfg, missing[0])}) is not in the {split} split of "
            f"{data.where(cfg)}; its columns: {', '.join(names)}"
        )


def _key_of(cfg: Any, column: str) -> str:
    keys = ("text_column", "label_column", "prompt_column", "response_column", "messages_column")
    return next(key for key in keys if getattr(cfg, key) == column)


def classes(cfg: Any, tables: dict[str, datasets.Dataset]) -> tuple[list[Any], list[str]]:
    """Return the label column's classes: (values in class order, their names).

    A ClassLabel column gives its own names; otherwise the distinct values of every split, sorted naturally."""
    feature = tables["train"].features[cfg.label_column]
    if isinstance(feature, datasets.ClassLabel):
        return list(range(feature.num_classes)), [str(n) for n in feature.names]
    seen: set[Any] = set()
    for split, table in tables.items():
        column = table.data.column(cfg.label_column)
        if column.null_count:
            raise ConfigError(
                f"data.label_column={cfg.label_column!r} has {column.null_count} empty value(s) in the {split} "
                f"split of {data.where(cfg)}; fill or drop those rows"
            )
        seen.update(pc.unique(column).to_pylist())
    if len(seen) < 2:
        raise ConfigError(f"data.label_column={cfg.label_column!r} has one value only: nothing to classify")
    values = sorted(seen, key=lambda v: _natural(str(v)))
    return values, [str(v) for v in values]


# ----------------------------------------------------------------------------------------------- encoding
def encoder(cfg: Any, tokenizer: Any, what: str, values: list[Any] | None) -> Callable[[dict[str, list]], dict]:
    """Return the batched map function that turns rows into token columns (input_ids, and label or labels)."""
    if what == "classification":
        assert values is not None
        index = {v: i for i, v in enumerate(values)}

        def classify(rows: dict[str, list]) -> dict[str, list]:
            encoded = dict(tokenizer(rows[cfg.text_column], truncation=True, max_length=cfg.max_length))
            unknown = [v for v in rows[cfg.label_column] if v not in index]
            if unknown:
                raise ConfigError(
                    f"data.label_column={cfg.label_column!r} holds {unknown[0]!r}, not one of its "
                    f"{len(index)} classes; drop those rows"
                )
            encoded["label"] = [index[v] for v in rows[cfg.label_column]]
            encoded.pop("attention_mask", None)  # all ones until padded: made per batch
            return encoded

        return classify
    if what == "packed":
        return lambda rows: pack(tokenizer, rows[cfg.text_column], cfg.block_size)

    def supervised(rows: dict[str, list]) -> dict[str, list]:
        if cfg.messages_column is not None:
            examples = [chat(cfg, tokenizer, messages) for messages in rows[cfg.messages_column]]
        else:
            pairs = zip(rows[cfg.prompt_column], rows[cfg.response_column])
            examples = [prompt_response(tokenizer, p, r, cfg.max_length) for p, r in pairs]
        return {key: [example[key] for example in examples] for key in ("input_ids", "labels")}

    return supervised


def pack(tokenizer: Any, texts: list[str], block_size: int) -> dict[str, list]:
    """Join the documents, each ended by eos, and cut blocks of block_size inputs and their next tokens."""
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(texts)["input_ids"]:
        stream += ids + ([eos] if eos is not None and (not ids or ids[-1] != eos) else [])
    blocks = (len(stream) - 1) // block_size
    starts = range(0, blocks * block_size, block_size)
    # consecutive blocks share one token: block i's last label is block i+1's first input
    return {
        "input_ids": [stream[s : s + block_size] for s in starts],
        "labels": [stream[s + 1 : s + block_size + 1] for s in starts],
    }


def _shifted(ids: list[int], counted: list[bool], limit: int) -> dict[str, list[int]]:
    """Return inputs and next-token labels of a sequence, -100 where the next token is not learned."""
    ids, counted = ids[: limit + 1], counted[: limit + 1]
    return {
        "input_ids": ids[:-1],
        "labels": [token if keep else IGNORE_INDEX for token, keep in zip(ids[1:], counted[1:])],
    }


def prompt_response(tokenizer: Any, prompt: str, response: str, max_length: int) -> dict[str, list[int]]:
    """Tokenize a prompt and its response (ended by eos); only the response's tokens are learned."""
    asked = tokenizer(prompt)["input_ids"]
    answered = tokenizer(response, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        answered = [*answered, tokenizer.eos_token_id]
    return _shifted(asked + answered, [False] * len(asked) + [True] * len(answered), max_length)


def chat(cfg: Any, tokenizer: Any, messages: list[dict[str, str]]) -> dict[str, list[int]]:
    """Render a conversation with the chat template; only the assistant's turns are learned."""

    def ids(turns: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    whole = ids(messages, False)
    counted = [False] * len(whole)
    for turn, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, through = ids(messages[:turn], True), ids(messages[: turn + 1], False)
        if whole[: len(through)] != through or through[: len(before)] != before:
            raise ConfigError(
                f"data.messages_column={cfg.messages_column}: the chat template of data.tokenizer={cfg.tokenizer} "
                "does not render a conversation's start as the start of the whole, so the assistant's tokens "
                "cannot be found; use data.prompt_column + data.response_column"
            )
        counted[len(before) : len(through)] = [True] * (len(through) - len(before))
    return _shifted(whole, counted, cfg.max_length)


def tokenized(cfg: Any, tokenizer: Any, table: datasets.Dataset, what: str, values: list[Any] | None) -> Any:
    """Map `table` to token columns, cached under a name that hashes the rows, the tokenizer and the settings."""
    encode = encoder(cfg, tokenizer, what, values)
    settings = [what, cfg.text_column, cfg.label_column, cfg.prompt_column, cfg.response_column]
    settings += [cfg.messages_column, cfg.max_length, cfg.block_size, values, MAP_BATCH]
    fingerprint = datasets.fingerprint.Hasher.hash([table._fingerprint, tokenizer, settings])
    cache = Path(cfg.cache_dir or datasets.config.HF_DATASETS_CACHE).expanduser() / "lab_tokenized"
    cache.mkdir(parents=True, exist_ok=True)
    return table.map(
        encode,
        batched=True,
        batch_size=MAP_BATCH,
        remove_columns=table.column_names,
        cache_file_name=str(cache / f"{fingerprint}.arrow"),
        new_fingerprint=fingerprint,
        desc=f"tokenizing ({what})",
    )


class TokenRows(Dataset):
    """One split of tokenized rows, items ``({"input_ids", "attention_mask"[, "token_type_ids"]}, target)``.

    ``__getitems__`` pads a whole batch to its longest row (the DataLoader hands it the batch's indices, in the
    training, validation and evaluation loaders alike), so no collate function is needed."""

    def __init__(self, table: datasets.Dataset, pad_id: int) -> None:
        self.table, self.pad_id = table.with_format("numpy"), pad_id
        self.target = "label" if "label" in table.column_names else "labels"

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        rows = self.table[list(indices)]
        return pad_batch(rows, self.target, self.pad_id)


def pad_batch(rows: dict[str, Any], target: str, pad_id: int) -> list[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Pad a batch's rows (columns of arrays) to its longest; labels are padded with -100."""
    ids = rows["input_ids"]
    width = max(len(row) for row in ids)

    def padded(column: Sequence[Any], fill: int) -> torch.Tensor:
        out = np.full((len(column), width), fill, dtype=np.int64)
        for i, row in enumerate(column):
            out[i, : len(row)] = row
        return torch.from_numpy(out)

    lengths = torch.tensor([len(row) for row in ids])
    inputs = {"input_ids": padded(ids, pad_id), "attention_mask": (torch.arange(width) < lengths[:, None]).long()}
    if "token_type_ids" in rows:
        inputs["token_type_ids"] = padded(rows["token_type_ids"], 0)
    targets = padded(rows[target], IGNORE_INDEX) if target == "labels" else torch.as_tensor(rows[target]).long()
    return [({k: v[i] for k, v in inputs.items()}, targets[i]) for i in range(len(ids))]


# ----------------------------------------------------------------------------------------------- building
def carve(cfg: Any, tables: dict[str, datasets.Dataset], strata: torch.Tensor | None) -> dict[str, Any]:
    """Carve the missing val (and test) splits out of train, as data=csv does (stratified by class when given)."""
    if "val" in tables:
        return tables
    train = tables["train"]
    labels = strata if strata is not None else torch.zeros(len(train), dtype=torch.long)
    if "test" in tables:
        keep, held = split_indices(labels, cfg.val_fraction, cfg.split_seed)
        picked = {"train": keep, "val": held}
    else:
        kept, val, test = train_val_test(labels, cfg)
        picked = {"train": kept, "val": val} | ({"test": test} if test is not None else {})
    # keep_in_memory: the row numbers stay in this process, not in a file next to the user's data
    return tables | {s: train.select(rows.tolist(), keep_in_memory=True) for s, rows in picked.items()}


def meta_of(cfg: Any, tokenizer: Any, what: str, names: list[str] | None) -> dict[str, Any]:
    """The checkpoint's data_meta: what sizes the model's head and lets eval rebuild the data."""
    length = cfg.block_size if what == "packed" else cfg.max_length
    meta: dict[str, Any] = {
        "tokenizer": str(cfg.tokenizer),
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "input_shape": [length],
        "task": "classification" if what == "classification" else "causal_lm",
    }
    if names is not None:
        return meta | {"num_classes": len(names), "num_outputs": len(names), "class_names": names}
    return meta | {"block_size": length, "num_outputs": len(tokenizer)}


def build(cfg: Any) -> DataModule:
    """Build the tokenized splits of data.path, data.dataset or data.data_files."""
    what = kind(cfg)
    tokenizer = load_tokenizer(cfg)
    tables = data.load_tables(cfg)
    for split, table in tables.items():
        check_columns(cfg, split, table.column_names, needed_columns(cfg, what))
    values, names = classes(cfg, tables) if what == "classification" else (None, None)
    strata = None
    if what == "classification" and "val" not in tables:
        assert values is not None
        index = {v: i for i, v in enumerate(values)}
        strata = torch.as_tensor([index[v] for v in tables["train"].data.column(cfg.label_column).to_pylist()])
    tables = carve(cfg, tables, strata)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0  # packed blocks are never padded
    splits = {s: TokenRows(tokenized(cfg, tokenizer, t, what, values), pad) for s, t in tables.items()}
    for split, rows in splits.items():
        if len(rows) == 0:
            raise ConfigError(
                f"the {split} split of {data.where(cfg)} gives no example after tokenizing (packed blocks of "
                f"data.block_size={cfg.block_size} tokens); give more text or lower data.block_size"
            )
    return DataModule(splits["train"], splits["val"], splits.get("test"), meta_of(cfg, tokenizer, what, names))
