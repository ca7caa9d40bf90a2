"""data=hf's option: the extra it needs refused by name when missing; one source of rows; text keys checked."""

from __future__ import annotations

import re

import pytest

from helpers import compose_config
from lab import extras
from lab.config import ConfigError, validate
from lab.extensions.hf.options import HfDataConfig


def test_data_hf_without_its_packages_is_refused_naming_the_extra(monkeypatch) -> None:
    cfg = compose_config(["data=hf", "data.path=/nowhere"])
    validate(cfg)  # installed here: accepted
    installed = extras.installed
    monkeypatch.setattr(extras, "installed", lambda dist: dist != "datasets" and installed(dist))
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    message, extra = str(caught.value), extras.extra_of("datasets")
    assert message.startswith("data=hf needs datasets"), message
    assert re.search(rf"make install EXTRAS=\S*\b{extra}\b", message) and f"-e '.[{extra}]'" in message, message


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({}, r"reads one of data.path .* got none$"),
        ({"path": "/a", "dataset": "imdb"}, r"got data.path and data.dataset$"),
        ({"dataset": "imdb", "pad_token": "unk"}, "data.pad_token must be null or eos"),
        ({"dataset": "imdb", "prompt_column": "q"}, "prompt_column and data.response_column go together"),
        ({"path": "/a", "streaming": True}, r"data.streaming=true reads text"),
    ],
)
def test_bad_keys_are_refused_in_one_line(keys, match) -> None:
    with pytest.raises(ConfigError, match=match):
        HfDataConfig(name="hf", target_type="class", **keys)


def test_a_table_for_a_language_model_is_refused_naming_the_text_keys() -> None:
    with pytest.raises(ConfigError, match=r"task=language_model reads text: set data\.text_column"):
        HfDataConfig(name="hf", path="/nowhere", target_type="tokens").build()
