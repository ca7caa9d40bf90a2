"""The extension's options: the extra each needs (EXTRAS), refused by name when it is missing, and the core's
prepare seam (DataConfig.prepare) naming them to the options without prepared files."""

from __future__ import annotations

import re

import pytest

from helpers import compose_config
from lab import extras
from lab.config import ConfigError, options, validate
from lab.extensions import big_data

OURS = ("shards", "tokens")


def test_every_option_needs_only_the_extras_the_extension_declares() -> None:
    ours = {name: cls for name, cls in options.options("data").items() if cls.__module__.startswith(big_data.__name__)}
    assert sorted(ours) == list(OURS)
    for cls in ours.values():
        assert cls.requires and {extras.extra_of(dist) for dist in cls.requires} <= set(big_data.EXTRAS), cls


@pytest.mark.parametrize(
    ("overrides", "hidden"),
    [
        (["data=shards", "data.path=/nowhere"], ("webdataset", "wids")),
        (["data=tokens", "data.path=/nowhere", "task=language_model", "model=gpt"], ("tokenizers",)),
    ],
)
def test_an_option_whose_extra_is_missing_is_refused_naming_the_extra(monkeypatch, overrides, hidden) -> None:
    cfg = compose_config(overrides)
    validate(cfg)  # installed here: accepted
    installed = extras.installed
    monkeypatch.setattr(extras, "installed", lambda dist: dist not in hidden and installed(dist))
    with pytest.raises(ConfigError) as caught:
        validate(cfg)
    message = str(caught.value)
    assert message.startswith(f"{overrides[0]} needs {hidden[0]}"), message
    assert re.search(r"make install EXTRAS=\S*\bdata\b", message) and "-e '.[data]'" in message, message


def test_a_dataset_without_prepared_files_names_these_when_asked_to_prepare() -> None:
    with pytest.raises(ConfigError, match=r"nothing to prepare; scripts/prepare_data\.py prepares ") as caught:
        options.instantiate("data", {"name": "digits"}).prepare()
    assert set(OURS) <= set(str(caught.value).rsplit(" prepares ", 1)[1].split(", "))
