"""infer.py's reader of text for a model=hf classifier: each line of a .txt file, or each record's "text" of a
.jsonl file, tokenized by the run's tokenizer and padded to the file's longest line.

The classifier is given the token ids alone; `HfModel` masks the padding by the tokenizer's padding id."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lab.errors import UserError
from lab.extensions.hf import hub

SUFFIXES = (".txt", ".jsonl")


def lines(path: Path) -> Iterator[tuple[str, str]]:
    """Yield (name, text) per non-empty line: `<file>:<line number>`."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        if path.suffix.lower() == ".jsonl":
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"input={path}:{number} is not JSON ({err.msg}); give one object a line") from err
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise UserError(f'input={path}:{number} has no "text" string; give {{"text": "..."}} a line')
            line = record["text"]
        yield f"{path}:{number}", line


def text_reader(tokenizer: str, revision: str | None) -> Any:
    """Return a `lab.inference.inputs.Reader` that tokenizes a file's lines with `tokenizer`."""

    def read(path: Path, meta: Mapping[str, Any], resize: bool) -> Iterator[tuple[str, Any, None]]:
        named = list(lines(path))
        if not named:
            raise UserError(f"input={path} has no text: give one input a line")
        tok = hub.load_tokenizer(tokenizer, revision)
        ids = tok([text for _, text in named], padding=True, truncation=True, return_tensors="pt")["input_ids"]
        for (name, _), row in zip(named, ids, strict=True):
            yield name, row, None

    return read
