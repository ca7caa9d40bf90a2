"""Every config option and key the documentation names still exists: a renamed key, a removed option or a moved
callback turns this red, not a reader's first command. The pages are README.md, docs/*.md and each extension's page;
what they name is each `group=option` (lists too) and each dotted `node.key=...` outside Python code."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from helpers import CONF_DIRS, REPO, core_pages, doc_pages, extensions_listed, group_options
from lab import extensions
from lab.config import SCHEMAS, options
from lab.config.options import snake_case
from lab.config.trackers import LoggerConfig

# the mistakes a page shows on purpose, with the one-line message they get
SHOWN_AS_MISTAKES = {"trainer.max_epoch", "precision=fp17", "model.depth"}
# `group=option` and `node.key=` in prose and shell lines (Python blocks are left out: keyword arguments)
TOKEN = re.compile(
    r"(?<![\w./$<{-])\+{0,2}([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)=(\[[^\]\s`']*\]|[\w-]*)(?![\w(])"
)  # a value before `(` is a sweep's glob(...): not an option
PRESET_GROUPS = {folder.name for conf in CONF_DIRS for folder in conf.iterdir() if folder.is_dir()}
# The extensions' options and presets the core's pages name: still names after `make drop` removes the extension
# (the page then tells of an option the fork no longer has, not of a typo); kept complete by the last test
EXTENSION_NAMES = {
    "anomaly", "bpe_lm", "cifar10_resnet18", "finetune_folder", "hf", "int8", "mlflow", "optuna", "profile",
    "resnet18", "shards", "stats", "tensorboard", "timm", "tokens", "torchvision", "muon", "wsd", "cv", "ray",
}  # fmt: skip
# The keys the core's pages name that extensions' options bring (`model.arch` is timm's), likewise: kept exact by the
# last test while every extension is here
EXTENSION_KEYS = {"cv.folds", "data.source", "data.streaming", "model.arch", "model.weights"}
PLACEHOLDERS = {"mine", "other"}  # `callback=[ema,mine]`: a reader's own option
NODES_OF_OPTIONS = {"callbacks": "callback"}  # a node holding one entry per chosen option of a kind


def _fields(cls: type) -> dict[str, typing.Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}


def _group_fields(group: str) -> set[str]:
    return {name for cls in [options._KINDS[group], *options.options(group).values()] for name in _fields(cls)}


def _without_python(text: str) -> str:
    """The page less its ```python blocks (their keyword arguments are not config keys)."""
    return re.sub(r"```python\n.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def _examples(pages: list[Path]) -> tuple[set[str], set[str]]:
    """The options and keys the pages' own examples define (a fork's GatedMlp: `model=gated_mlp`, `model.hidden`)."""
    names, keys = set(), set()
    for page in pages:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            for name, body in re.findall(r"^class (\w+)\(\w+\):.*\n((?:[ \t]+.*\n|\n)*)", block, flags=re.M):
                names.add(snake_case(re.sub(r"Config$", "", name)))
                keys.update(re.findall(r"^    (\w+): ", body, flags=re.M))
        names.update(re.findall(r"conf/\w+/(\w+)\.yaml", page.read_text()))  # a preset the page writes
    return names, keys


EXAMPLE_OPTIONS, EXAMPLE_KEYS = _examples(doc_pages())


def _problem(path: str, value: str) -> str | None:
    parts = path.split(".")
    head = parts[0]
    if path in SHOWN_AS_MISTAKES or f"{path}={value}" in SHOWN_AS_MISTAKES or head == "hydra":
        return None
    if len(parts) == 1:
        if head not in (set(options.groups()) | PRESET_GROUPS | {"logger"}) - {"tracker", "export_step", "eval_step"}:
            return None  # a top-level key, or not config at all (a shell variable, a make argument)
        names = [n.strip() for n in value.strip("[]").split(",") if re.fullmatch(r"[a-z_0-9]{2,}", n.strip())]
        known = {*group_options(head), *EXAMPLE_OPTIONS, *EXTENSION_NAMES, *PLACEHOLDERS, "none"}
        unknown = [n for n in names if n not in known]
        return f"{head}={','.join(unknown)} is not an option of {head}" if unknown else None
    key = parts[1]
    if head in options.groups() and options._KINDS[head].package is None:
        return None if key in _group_fields(head) | EXAMPLE_KEYS else f"no {head} option has the key {key}"
    if head in NODES_OF_OPTIONS or head in ("logger", "export", "eval"):
        kind = NODES_OF_OPTIONS.get(head) or {"logger": "tracker", "export": "export_step", "eval": "eval_step"}[head]
        chosen = options.options(kind)
        if key in chosen:
            return None if len(parts) < 3 or parts[2] in _fields(chosen[key]) else f"{path} is no key of {key}"
        if key in EXAMPLE_OPTIONS | EXTENSION_NAMES or (head == "logger" and key in _fields(LoggerConfig)):
            return None
    for schema in SCHEMAS.values():  # an entry schema's own node: trainer, paths, eval, infer, export, ...
        node = typing.get_origin(_fields(schema).get(head)) or _fields(schema).get(head)
        if node is None:
            continue
        if not dataclasses.is_dataclass(node) or key in _fields(node):  # type: ignore[arg-type]
            return None
    return f"{path} is not a config key"


def _named(page: Path) -> list[tuple[int, str, str]]:
    text = _without_python(page.read_text())
    return [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in TOKEN.finditer(text)]


def _brought_by_extensions(path: str) -> bool:
    """Whether `path` (`model.arch`, `cv.folds`) is a key only an extension's option or node has."""
    head, key = [*path.split("."), ""][:2]
    if head in options.groups() and options._KINDS[head].package is None:
        core = [cls for cls in options.options(head).values() if ".extensions." not in cls.__module__]
        return key in _group_fields(head) - {name for cls in [options._KINDS[head], *core] for name in _fields(cls)}
    node = _fields(SCHEMAS["train_schema"]).get(head)
    return ".extensions." in getattr(node, "__module__", "")


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_option_and_key_a_page_names_exists(page: Path) -> None:
    stale = [
        f"line {line}: {path}={value}: {why}"
        for line, path, value in _named(page)
        if (why := _problem(path, value)) and ".".join(path.split(".")[:2]) not in EXTENSION_KEYS
    ]
    assert not stale, f"{page.relative_to(REPO)} names what the config no longer has:\n" + "\n".join(stale)


def test_the_check_finds_a_stale_key_and_option() -> None:
    assert _problem("trainer.ema", "0.9") and _problem("model", "resnet99") and _problem("callbacks.ema.decy", "1")
    assert not _problem("callbacks.ema.decay", "0.9") and not _problem("optimizer", "adamw")


def test_every_extension_option_a_core_page_names_is_listed() -> None:
    """What makes EXTENSION_NAMES complete while the extensions are here: each of their options and presets that
    README.md or docs/ names is in it."""
    brought = {
        name
        for group in options.groups()
        for name, cls in options.options(group).items()
        if ".extensions." in cls.__module__
    }
    brought |= {preset.stem for conf in CONF_DIRS[1:] for preset in conf.rglob("*.yaml")}
    named = set()
    for page in core_pages():
        for _, path, value in _named(page):
            named |= {n.strip() for n in value.strip("[]").split(",")} | set(path.split("."))
    assert named & brought <= EXTENSION_NAMES, sorted(named & brought - EXTENSION_NAMES)


def test_every_extension_key_a_core_page_names_is_listed() -> None:
    """What keeps EXTENSION_KEYS exact while the template's extensions are all here (after `make drop` it holds the
    keys of what was dropped too)."""
    if not extensions_listed() <= set(extensions.names()):
        pytest.skip("an extension was dropped: its keys cannot be told from the core's")
    named = {".".join(path.split(".")[:2]) for page in core_pages() for _, path, _ in _named(page) if "." in path}
    assert {path for path in named if _brought_by_extensions(path)} == EXTENSION_KEYS
