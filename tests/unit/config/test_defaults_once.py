"""Each default is written once: in its schema (the dataclasses of src/lab/config/, and of the Hydra plugins' configs),
while a YAML in conf/ (or in an extension's conf/) holds only what differs from it.

Two ways a default gets written twice, each checked on every YAML under conf/:
- a repeat: a YAML value that changes nothing, because the config composes to the same value without it (the
  YAML's body removed, its defaults list kept) in every context the YAML is used in;
- a dead default: a schema default that every YAML extending the schema replaces by one same value, so the schema
  and the YAML disagree and only the YAML's value ever runs (the Optuna sweeper's sampler, the cosine schedule's
  warmup, before they moved into their schemas).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from omegaconf import OmegaConf

from helpers import CONF_DIR, CONF_DIRS
from lab.config import SCHEMAS, TrainConfig, options

Key = tuple[str, ...]
# A sweeper's `params` are what it sweeps (the search space of hparams_search=optuna): a preset's content, not a
# default of the sweeper's config.
SWEPT = frozenset({"params"})


def _yaml_files(conf_dir: Path) -> list[str]:
    return sorted(str(path.relative_to(conf_dir)) for path in conf_dir.rglob("*.yaml"))


def _package(conf_dir: Path, rel: str) -> str | None:
    for line in (conf_dir / rel).read_text().splitlines():
        if line.startswith("# @package"):
            return line.split()[-1]
    return None


def _body(conf_dir: Path, rel: str) -> dict[str, Any]:
    raw = OmegaConf.to_container(OmegaConf.load(conf_dir / rel), resolve=False)
    raw.pop("defaults", None)
    return raw


def _leaves(node: dict[str, Any], prefix: Key = ()) -> Iterator[tuple[Key, Any]]:
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _where(conf_dir: Path, rel: str) -> tuple[str, Key, list[list[str]]]:
    """(config name, the key path the YAML's body lands at, the override lists of the contexts it is used in)."""
    parts = Path(rel).with_suffix("").parts
    if len(parts) == 1:  # an entry config: train.yaml, eval.yaml...
        return parts[0], (), [[]]
    group, option = "/".join(parts[:-1]), parts[-1]
    package = _package(conf_dir, rel)
    prefix: Key = () if package == "_global_" else tuple(package.split(".")) if package else tuple(parts[:-1])
    choose = [] if rel == "hydra/default.yaml" else [f"{group}={option}"]
    contexts = [choose]
    if group == "debug":  # debug options shorten any experiment: a value may matter only under one
        contexts += [[f"experiment={e}", *choose] for e in _options(conf_dir, "experiment")]
    return "train", prefix, contexts


def _options(conf_dir: Path, group: str) -> list[str]:
    return sorted(path.stem for path in (conf_dir / group).glob("*.yaml"))


def _composed(conf_dir: Path, config_name: str, overrides: list[str]) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(cfg, resolve=False)


def _lookup(node: Any, key: Key) -> tuple[bool, Any]:
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def repeats(conf_dir: Path, rel: str) -> list[str]:
    """The values of conf_dir/rel that the config would hold without them, in every context the YAML is used in."""
    body = _body(conf_dir, rel)
    if not body:
        return []
    path = conf_dir / rel
    original = path.read_text()
    header = "".join(f"{line}\n" for line in original.splitlines() if line.startswith("# @package"))
    defaults = OmegaConf.to_container(OmegaConf.load(path)).get("defaults")
    config_name, prefix, contexts = _where(conf_dir, rel)
    unchanged = dict(_leaves(body))
    try:
        path.write_text(header + (OmegaConf.to_yaml({"defaults": defaults}) if defaults else ""))
        for overrides in contexts:
            without = _composed(conf_dir, config_name, overrides)
            for key, value in list(unchanged.items()):
                found, other = _lookup(without, (*prefix, *key))
                if not (found and other == value):
                    del unchanged[key]
    finally:
        path.write_text(original)
    return [f"{rel}: {'.'.join(key)}: {value!r}" for key, value in unchanged.items()]


def _extended(conf_dir: Path, rel: str) -> list[str]:
    return [
        entry.split("@")[0]
        for entry in OmegaConf.to_container(OmegaConf.load(conf_dir / rel)).get("defaults") or []
        if isinstance(entry, str)
    ]


def _plugin_schema(conf_dir: Path, rel: str) -> tuple[Key, type, frozenset[str]] | None:
    """A YAML that chooses a Hydra plugin (`override /hydra/sweeper: lab_optuna`) and sets its keys: where they are,
    the dataclass of the plugin's stored config, and the keys that are the preset's content."""
    for entry in OmegaConf.to_container(OmegaConf.load(conf_dir / rel)).get("defaults") or []:
        for key, choice in entry.items() if isinstance(entry, dict) else ():
            if key.startswith("override /hydra/"):
                group = key.removeprefix("override /")
                Plugins.instance()  # Hydra's plugin scan stores the plugins' configs (hydra_plugins/)
                node = ConfigStore.instance().load(f"{group}/{choice}.yaml").node
                return tuple(group.split("/")), OmegaConf.get_type(node), SWEPT
    return None


def _schema_of(conf_dir: Path, rel: str) -> tuple[Key, type, frozenset[str]] | None:
    """The schema whose defaults only this kind of YAML ever changes. An option class (model=torchvision) and a
    plain option (precision=fp32) run with their own defaults, so a preset extending them leaves none dead."""
    plugin = _plugin_schema(conf_dir, rel)
    if plugin is not None:
        return plugin
    for name in _extended(conf_dir, rel):
        schema = SCHEMAS.get(name.lstrip("/"))
        if schema is not None:
            return (), schema, frozenset()
    return None


def _extends_an_option(conf_dir: Path, rel: str) -> bool:
    """A preset: its defaults list names an option class of its own group, or a schema (a Hydra plugin's too), or
    the entry schema types its group's node (logger: a list of its YAMLs is merged in turn)."""
    group = Path(rel).parent.as_posix()
    typed = TrainConfig.__dataclass_fields__.get(group)
    if typed is not None and typed.type not in ("Any", Any):
        return True
    return _plugin_schema(conf_dir, rel) is not None or any(
        name in options.options(group) or name.lstrip("/") in SCHEMAS for name in _extended(conf_dir, rel)
    )


def dead_defaults(conf_dir: Path) -> list[str]:
    """Schema defaults that every YAML extending the schema replaces, all by one same value."""
    users: dict[type, list[tuple[str, dict[Key, Any]]]] = {}
    for rel in _yaml_files(conf_dir):
        found = _schema_of(conf_dir, rel)
        if found is not None:
            at, schema, exempt = found
            _, body = _lookup(_body(conf_dir, rel), at)
            values = {key: value for key, value in _leaves(body or {}) if key[0] not in exempt}
            users.setdefault(schema, []).append((rel, values))
    problems = []
    for schema, yamls in users.items():
        defaults = OmegaConf.to_container(OmegaConf.structured(schema), resolve=False)
        (_, first), *others = yamls
        for key, value in first.items():
            everywhere = all(key in values and values[key] == value for _, values in others)
            if everywhere and _lookup(defaults, key) != (True, value):
                where = ", ".join(rel for rel, _ in yamls)
                problems.append(f"{schema.__name__}.{'.'.join(key)}: {where} all set {value!r}: make it the default")
    return problems


# --------------------------------------------------------------------------- the shipped conf/ (and the extensions')
def _copy_of_the_presets(conf: Path) -> Path:
    """One folder holding conf/ and every extension's presets, conf/'s winning (as on Hydra's search path). A preset
    in it hides an extension's own of the same name, so rewriting the copy changes what composes."""
    for folder in reversed(CONF_DIRS):
        shutil.copytree(folder, conf, dirs_exist_ok=True)
    return conf


@pytest.mark.parametrize("rel", sorted({rel for folder in CONF_DIRS for rel in _yaml_files(folder)}))
def test_no_yaml_value_repeats_a_default(rel: str, tmp_path: Path) -> None:
    conf = _copy_of_the_presets(tmp_path / "conf")  # the YAML is rewritten while checking: never where it lives
    assert repeats(conf, rel) == [], "these values are the defaults already; remove them from the YAML"


def test_no_schema_default_is_replaced_by_every_yaml(tmp_path: Path) -> None:
    assert dead_defaults(_copy_of_the_presets(tmp_path / "conf")) == []


def test_every_group_yaml_is_a_preset_that_holds_values(tmp_path: Path) -> None:
    """The rule's premise: a group option's YAML extends an option or a schema holding its defaults (Hydra's own
    hydra/ node aside), and holds at least one value (an option with nothing to change is its class: no YAML)."""
    conf = _copy_of_the_presets(tmp_path / "conf")
    presets = [rel for rel in _yaml_files(conf) if "/" in rel and _package(conf, rel) != "_global_"]
    assert "hydra/default.yaml" in presets  # the files in the groups' folders are found
    lacking = [rel for rel in presets if rel != "hydra/default.yaml" and not _extends_an_option(conf, rel)]
    assert lacking == []
    assert [rel for rel in presets if not _body(conf, rel)] == []


# --------------------------------------------------------------------------- the checks can fail
@pytest.fixture
def conf(tmp_path: Path) -> Path:
    shutil.copytree(CONF_DIR, tmp_path / "conf")
    return tmp_path / "conf"


# A preset of the grid sweeper's, as a search preset sets its sweeper's keys (planted where hparams_search finds it)
GRID_PRESET = "# @package _global_\ndefaults:\n  - override /hydra/sweeper: lab_grid\nhydra:\n  sweeper:\n"


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_a_planted_repeat_is_found(conf: Path) -> None:
    (conf / "model").mkdir(exist_ok=True)
    (conf / "model/wide_cnn.yaml").write_text("defaults:\n  - cnn\n")  # a preset of model=cnn
    _append(conf / "model/wide_cnn.yaml", "dropout: 0.1\nfreeze: [fc.*]\n")  # the first is the option's default
    _append(conf / "experiment/digits_mlp.yaml", "model:\n  hidden_dims: [256, 128]\n")  # what model=mlp gives
    (conf / "hparams_search").mkdir(exist_ok=True)
    (conf / "hparams_search/grid.yaml").write_text(
        GRID_PRESET + '    max_batch_size: null\n    params: {seed: "1,2"}\n'
    )
    assert repeats(conf, "model/wide_cnn.yaml") == ["model/wide_cnn.yaml: dropout: 0.1"]
    assert repeats(conf, "experiment/digits_mlp.yaml") == ["experiment/digits_mlp.yaml: model.hidden_dims: [256, 128]"]
    assert repeats(conf, "hparams_search/grid.yaml") == ["hparams_search/grid.yaml: hydra.sweeper.max_batch_size: None"]


def test_a_debug_value_that_matters_under_an_experiment_is_no_repeat(conf: Path) -> None:
    # debug=overfit's warmup 0 is constant's default, but not char_lm's (50): it stays
    assert repeats(conf, "debug/overfit.yaml") == []
    (conf / "debug/overfit.yaml").write_text(
        (conf / "debug/overfit.yaml").read_text().replace("max_epochs: 150", "max_epochs: 10")
    )
    assert repeats(conf, "debug/overfit.yaml") == []  # 10 = TrainerConfig's, but digits_mlp trains 20


def test_a_schema_default_every_yaml_replaces_is_found(conf: Path) -> None:
    (conf / "hparams_search").mkdir(exist_ok=True)
    (conf / "hparams_search/grid.yaml").write_text(GRID_PRESET + '    max_batch_size: 4\n    params: {seed: "1,2"}\n')
    assert sorted(dead_defaults(conf)) == [
        "GridSweeperConf.max_batch_size: hparams_search/grid.yaml all set 4: make it the default",
    ]
