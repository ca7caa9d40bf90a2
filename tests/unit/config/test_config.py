"""lab.config + conf/: every group option composes and validates; bad overrides fail early with the key named.

Compose-time failures (unknown key, wrong type) come from Hydra/OmegaConf because every option extends a schema
(one per schedule and per strategy too); value failures and keys added with `+` come from ``lab.config.validate``
as ``ConfigError``. tests/unit/config/ checks that each default is written once and what the scripts print.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from packaging.utils import canonicalize_name

from helpers import CONF_DIR, GROUPS, PYTHON, REPO, TRAIN_SCRIPT, compose_config, group_options, preset_file, script_env
from lab.config import ConfigError, TrainConfig, options, validate
from lab.config.trackers import trackers


def required_overrides(group: str, option: str) -> list[str]:
    """What a real run of `<group>=<option>` passes beside it: the option's `example_overrides`, and a value of its
    own name for each mandatory key (???) they leave unset."""
    cls = options.options(group).get(option)
    if cls is None:  # a preset (a YAML): its values are written in it
        return []
    node = options.package(group, option) or group
    given = {override.partition("=")[0] for override in cls.example_overrides}
    mandatory = [field.name for field in cls.__dataclass_fields__.values() if field.default == MISSING]
    return [*cls.example_overrides, *(f"{node}.{key}={key}" for key in mandatory if f"{node}.{key}" not in given)]


ALL_OPTIONS = [(group, option) for group in GROUPS for option in group_options(group)]
PRESETS = [(group, option) for group, option in ALL_OPTIONS if preset_file(group, option) is not None]
# the options chosen by `<group>=<name>` (a tracker is turned on by `logger=<name>`: tests/unit/tracking)
CLASSES = [(group, name) for group in options.groups() if group in GROUPS for name in options.options(group)]


@functools.cache
def _compose_readonly(overrides: tuple[str, ...]) -> DictConfig:
    """Composing costs ~0.1 s; the per-option tests share one read-only result per override list."""
    cfg = compose_config(overrides)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def test_every_group_has_options() -> None:
    for group in GROUPS:
        assert group_options(group), f"conf/{group}/ has no options"
    assert len(ALL_OPTIONS) >= 20  # the discovery itself works (no silently empty parametrization)


# --------------------------------------------------------------------------- composing the options
def test_defaults(compose) -> None:
    cfg = compose()
    validate(cfg)
    assert cfg.model.name == "cnn"
    assert cfg.data.name == "digits"
    assert cfg.optimizer.name == "adamw"
    assert cfg.scheduler.name == "cosine"
    assert cfg.precision.name == "fp32"
    assert cfg.dist.strategy == "none"
    assert cfg.seed == 42
    assert "hydra" not in cfg  # return_hydra_config=False


@pytest.mark.parametrize(("group", "option"), ALL_OPTIONS, ids=[f"{g}={o}" for g, o in ALL_OPTIONS])
def test_every_option_composes_and_validates(group: str, option: str) -> None:
    cfg = _compose_readonly((f"{group}={option}", *required_overrides(group, option)))
    validate(cfg)
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, TrainConfig)


def _yaml_leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _yaml_leaves(value, f"{path}.")
        else:
            yield path, value


def _assert_option_applied(cfg: DictConfig, group: str, option: str, skip: frozenset[str] = frozenset()) -> None:
    """Every value written in conf/<group>/<option>.yaml (or an extension's) is what the composed config holds (but
    `skip`)."""
    path = preset_file(group, option)
    if path is None:  # an option class: test_every_option_class_defaults_reach_the_composed_config
        return
    is_global = any(line.strip() == "# @package _global_" for line in path.read_text().splitlines()[:3])
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    defaults = raw.pop("defaults", [])
    leaves = dict(_yaml_leaves(raw, "" if is_global else f"{group}."))
    for entry in defaults:
        if isinstance(entry, dict):  # `override /model: mlp` in an experiment; its own values win over the option's
            for key, sub_option in entry.items():
                if key.startswith("override /"):
                    _assert_option_applied(cfg, key.removeprefix("override /"), sub_option, frozenset(leaves))
    for leaf, expected in leaves.items():
        if leaf in skip:
            continue
        parent_path, _, key = leaf.rpartition(".")
        parent = OmegaConf.select(cfg, parent_path) if parent_path else cfg
        assert parent is not None and key in list(parent), f"{path.name}: {leaf} is not in the composed config"
        if expected == "???":
            assert OmegaConf.is_missing(parent, key), f"{path.name}: {leaf} should stay mandatory (???)"
            continue
        if isinstance(expected, str) and "${" in expected:  # an interpolation: compare it unresolved
            actual = OmegaConf.to_container(parent, resolve=False)[key]
        else:
            actual = parent[key]
        if isinstance(actual, (DictConfig, ListConfig)):
            actual = OmegaConf.to_container(actual)
        assert actual == expected, f"{path.name}: {leaf} is {actual!r} in the composed config, not {expected!r}"


@pytest.mark.parametrize(("group", "option"), [pytest.param(g, o, id=f"{g}={o}") for g, o in PRESETS])
def test_every_preset_values_reach_the_composed_config(group: str, option: str) -> None:
    _assert_option_applied(_compose_readonly((f"{group}={option}",)), group, option)


@pytest.mark.parametrize(("group", "option"), [pytest.param(g, o, id=f"{g}={o}") for g, o in CLASSES])
def test_every_option_class_defaults_reach_the_composed_config(group: str, option: str) -> None:
    """``<group>=<name>`` with no YAML: the node is the option class's defaults, typed by it."""
    cfg = _compose_readonly((f"{group}={option}", *required_overrides(group, option)))
    cls = options.option_class(group, option)
    path = options.package(group, option) or group  # a callback lands in callbacks.<name>
    node = OmegaConf.select(cfg, path)
    assert OmegaConf.get_type(node) is cls
    expected = OmegaConf.to_container(OmegaConf.structured(cls), resolve=False)
    actual = OmegaConf.to_container(node, resolve=False)
    for override in required_overrides(group, option):  # its own keys they set (not another group's, e.g. task=)
        key = override.partition("=")[0]
        if key.startswith(f"{path}."):
            actual.pop(key[len(path) + 1 :]), expected.pop(key[len(path) + 1 :])
    assert actual == expected


def test_experiment_switches_groups(compose) -> None:
    cfg = compose(["experiment=digits_mlp"])
    assert cfg.model.name == "mlp" and "hidden_dims" in cfg.model and "channels" not in cfg.model
    assert cfg.optimizer.lr == pytest.approx(2e-3)


def test_command_line_overrides_win(compose) -> None:
    cfg = compose(["optimizer=sgd", "optimizer.lr=0.5", "model=mlp", "model.hidden_dims=[8]", "seed=7"])
    validate(cfg)
    assert cfg.optimizer.name == "sgd" and cfg.optimizer.lr == 0.5
    assert list(cfg.model.hidden_dims) == [8] and cfg.seed == 7


# --------------------------------------------------------------------------- bad overrides
@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["model.foo=1"], "model.foo"),
        (["trainer.bogus=1"], "trainer.bogus"),
        (["model.hidden_dims=[8]"], "model.hidden_dims"),  # an mlp key on the default cnn: typed per model
        (["bogus_top_level=1"], "bogus_top_level"),
        (["data.batch_size=abc"], "data.batch_size"),
        (["trainer.max_epochs=1.5"], "trainer.max_epochs"),
        (["trainer.compile=maybe"], "trainer.compile"),
        (["optimizer=sgd", "optimizer.nesterov=sometimes"], "optimizer.nesterov"),
    ],
)
def test_unknown_keys_and_wrong_types_fail_while_composing(compose, overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigCompositionException, match=re.escape(key)):
        compose(overrides)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["optimizer.lr=-1"], "optimizer.lr"),
        (["optimizer.lr=0"], "optimizer.lr"),
        (["optimizer=sgd", "optimizer.lr=-1"], "optimizer.lr"),
        (["optimizer=sgd", "optimizer.momentum=0"], "optimizer.nesterov"),
        (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay"),
        (["data.batch_size=0"], "data.batch_size"),
        (["data.val_fraction=1.0"], "data.val_fraction"),
        (["trainer.grad_accum_steps=0"], "trainer.grad_accum_steps"),
        (["trainer.max_epochs=0"], "trainer.max_epochs"),
        (["trainer.max_steps=0"], "trainer.max_steps"),
        (["trainer.grad_clip=0"], "trainer.grad_clip"),
        (["trainer.limit_val_batches=0"], "trainer.limit_val_batches"),  # would validate on nothing: KeyError
        (["trainer.limit_train_batches=-2"], "trainer.limit_train_batches"),
        (["trainer.device=tpu"], "trainer.device"),
        (["scheduler.warmup_steps=-5"], "scheduler.warmup_steps"),
        (["scheduler.name=linear"], "scheduler.name"),
        (["scheduler.min_lr_ratio=2"], "scheduler.min_lr_ratio"),
        (["precision.dtype=float8"], "precision.dtype"),
        (["model=mlp", "model.dropout=1.0"], "model.dropout"),
        (["model.channels=[]"], "model.channels"),
        (["seed=-1"], "seed"),
        # each would pass a plain sign check and fail only after data and model are built, or train on NaN
        (["optimizer.lr=inf"], "optimizer.lr"),
        (["optimizer.lr=nan"], "optimizer.lr"),
        (["optimizer.lr=1e308"], "optimizer.lr"),
        (["optimizer=sgd", "optimizer.lr=1e308"], "optimizer.lr"),
        (["optimizer.weight_decay=inf"], "optimizer.weight_decay"),
        (["optimizer.weight_decay=nan"], "optimizer.weight_decay"),
        (["optimizer.weight_decay=1e308"], "optimizer.weight_decay"),
        (["optimizer=sgd", "optimizer.momentum=inf"], "optimizer.momentum"),
        (["optimizer.betas=[0.9,1.0]"], r"optimizer.betas[1]"),
        (["optimizer.betas=[-0.1,0.999]"], r"optimizer.betas[0]"),
        (["optimizer.betas=[0.9]"], "optimizer.betas"),
        (["optimizer.eps=0"], "optimizer.eps"),
        (["seed=4294967296"], "seed"),  # 2**32: numpy's seeds end at 2**32 - 1
        (["data.split_seed=-1"], "data.split_seed"),
        ([f"tags=[{'t' * 65}]"], "tags[0]"),  # wandb refuses a tag over 64 characters
        (["logger.wandb.tags=['']"], "logger.wandb.tags[0]"),
        (["logger.wandb.project=team/project"], "logger.wandb.project"),
    ],
)
def test_bad_values_raise_config_error_naming_the_key(compose, overrides: list[str], key: str) -> None:
    cfg = compose(overrides)  # types are fine: composing succeeds, the value check is validate's job
    with pytest.raises(ConfigError, match=rf"(^|\W){re.escape(key)}\W"):
        validate(cfg)


# --------------------------------------------------------------------------- one schema per schedule and strategy
@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["scheduler=step", "scheduler.min_lr_ratio=0.1"], "min_lr_ratio"),  # cosine's
        (["scheduler=cosine", "scheduler.patience=3"], "patience"),  # plateau's
        (["scheduler=constant", "scheduler.monitor=val/loss"], "monitor"),
        (["dist=none", "dist.nproc=2"], "nproc"),  # launch keys mean nothing for one process
        (["dist=ddp", "dist.reshard_after_forward=false"], "reshard_after_forward"),  # FSDP's
        (["dist=fsdp", "dist.find_unused_parameters=true"], "find_unused_parameters"),  # DDP's
    ],
)
def test_a_key_of_another_schedule_or_strategy_is_refused(compose, overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigCompositionException) as failed:
        compose(overrides)
    assert f"Key '{key}' not in" in str(failed.value.__cause__)


# the keys of every strategy that runs a process group (dist=ddp and dist=fsdp add one each)
PROCESS_GROUP_KEYS = {"strategy", "lr_scaling", "base_batch_size", "nproc", "backend", "sync_bn", "master_port"}
PROCESS_GROUP_KEYS |= {"timeout_s", "grace_s", "max_restarts"}


@pytest.mark.parametrize(
    ("group", "option", "keys"),
    [
        ("scheduler", "cosine", {"name", "warmup_steps", "min_lr_ratio"}),
        ("scheduler", "step", {"name", "warmup_steps", "step_size", "gamma"}),
        ("scheduler", "onecycle", {"name", "warmup_steps"}),
        ("scheduler", "plateau", {"name", "warmup_steps", "monitor", "mode", "factor", "patience"}),
        ("scheduler", "constant", {"name", "warmup_steps"}),
        ("dist", "none", {"strategy", "lr_scaling", "base_batch_size"}),
        ("dist", "ddp", {*PROCESS_GROUP_KEYS, "find_unused_parameters"}),
        ("dist", "fsdp", {*PROCESS_GROUP_KEYS, "reshard_after_forward", "meta_init"}),
    ],
)
def test_each_schedule_and_strategy_has_its_own_keys(group: str, option: str, keys: set[str]) -> None:
    node = _compose_readonly((f"{group}={option}",))[group]
    assert set(node) == keys
    assert node[{"scheduler": "name", "dist": "strategy"}[group]] == option


def test_the_schedule_name_and_the_strategy_come_with_the_option(compose) -> None:
    for overrides, key in (
        (["scheduler=cosine", "scheduler.name=step"], "scheduler.name"),
        (["dist=none", "dist.strategy=ddp"], "dist.strategy"),
    ):
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=.*choose .* with {key.split('.')[0]}=<name>"):
            validate(compose(overrides))


def test_intended_defaults_of_a_schedule_live_in_its_schema(compose) -> None:
    assert compose(["scheduler=cosine"]).scheduler.warmup_steps == 20
    assert compose(["scheduler=onecycle"]).scheduler.warmup_steps == 50
    assert compose(["scheduler=step"]).scheduler.warmup_steps == 0


def test_debug_overfit_uses_a_constant_lr_even_under_an_experiment(compose) -> None:
    for overrides in ([], ["experiment=cifar10_fast"], ["experiment=char_lm"]):
        scheduler = compose([*overrides, "debug=overfit"]).scheduler
        assert scheduler.name == "constant" and scheduler.warmup_steps == 0, overrides


def test_a_key_added_with_plus_is_refused_by_validate(compose) -> None:
    """Hydra's `+key=value` adds a key to a typed node whatever its schema says; validate refuses it. The options
    that do have it are read from the registry, not spelt here: a fork's dataset with `num_samples` (the README's
    example) is one more of them."""
    owners = [
        f"data={name}" for name, cls in options.options("data").items() if "num_samples" in cls.__dataclass_fields__
    ]
    assert "data=synthetic" in owners
    for overrides, message in (
        (["+model.depth=2"], "model.depth is not a key of model=cnn"),
        (
            ["data=digits", "+data.num_samples=5"],
            "data.num_samples is not a key of data=digits; did you mean data.num_classes? "
            f"({', '.join(owners)} {'have' if len(owners) > 1 else 'has'} it)",
        ),
        (["++trainer.max_epoch=3"], "trainer.max_epoch is not a key of trainer; did you mean trainer.max_epochs?"),
        # a tracker's own settings are in its node (logger.wandb.*), not in logger
        (["+logger.mode=offline"], "logger.mode is not a key of logger; did you mean logger.wandb.mode?"),
        (["+bogus=1"], "bogus is not a key of the config"),
    ):
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
            validate(compose(overrides))


@pytest.mark.parametrize("group", ["data", "task", "model", "optimizer", "scheduler", "precision", "dist"])
def test_every_chosen_option_may_refuse_the_run_it_is_chosen_in(compose, monkeypatch, group: str) -> None:
    """`Option.conflict(run)`, asked of each chosen option once the run's values are checked: a fork's task that
    needs a file, or an optimizer that cannot shard, refuses the run before any work."""
    cfg = compose()
    chosen = OmegaConf.get_type(cfg[group])  # the node is typed by the chosen option's class
    monkeypatch.setattr(chosen, "conflict", lambda self, run: f"{group} is {getattr(run, group) is self}: refused")
    with pytest.raises(ConfigError, match=rf"^{group} is True: refused"):
        validate(cfg)


def test_seed_zero_is_a_valid_seed(compose) -> None:
    cfg = compose(["seed=0"])
    validate(cfg)
    assert OmegaConf.to_object(cfg).seed == 0


def test_the_limits_themselves_are_valid(compose) -> None:
    """Each bound is where the refusal starts, not before: the largest seed numpy takes, a 64-character tag, betas
    of 0, the largest learning rate."""
    cfg = compose(
        [
            "seed=4294967295",
            f"tags=[{'t' * 64}]",
            "optimizer.betas=[0.0,0.0]",
            "optimizer.lr=100",
            "optimizer.weight_decay=0",
        ]
    )
    validate(cfg)
    assert OmegaConf.to_object(cfg).seed == 2**32 - 1


@pytest.mark.parametrize(
    ("config_name", "overrides", "message"),
    [
        ("infer", ["ckpt_path=m.onnx", "input=x.npy", "infer.seed=-1"], "infer.seed must be in [0, 2**32 - 1]"),
        ("eval", ["ckpt_path=best.pt", f"tags=[{'e' * 65}]"], "has 65 characters; wandb takes tags of 1 to 64"),
        ("export", ["ckpt_path=best.pt", f"logger.wandb.tags=[{'x' * 80}]"], "logger.wandb.tags[0]='xxx"),
    ],
)
def test_the_checkpoint_scripts_check_seeds_and_tags_too(compose, config_name, overrides, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(overrides, config_name))


# --------------------------------------------------------------------------- the CLI (subprocesses: keep these few)
def _run_train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, str(TRAIN_SCRIPT), *args], cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=60
    )


@pytest.mark.integration  # runs the entry script
def test_cli_unknown_option_lists_the_valid_ones() -> None:
    proc = _run_train("precision=fp17")
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        "error: precision=fp17 is not an option of precision; did you mean precision=fp16?",
        f"  options of precision: {', '.join(group_options('precision'))}",
    ]
    assert set(group_options("precision")) >= {"fp32", "amp", "bf16", "fp16"}


@pytest.mark.integration  # runs the entry script
def test_cli_bad_value_is_one_error_line_without_traceback(tmp_path) -> None:
    proc = _run_train("optimizer.lr=-1", f"hydra.run.dir={tmp_path}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Traceback" not in out
    error_lines = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, out
    assert "optimizer.lr" in error_lines[0]


def _imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from `python -X importtime` lines: 'import time: <self> | <cumulative> | <indent><name>'."""
    modules = set()
    for line in importtime_stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        fields = line.split("|")
        if len(fields) == 3 and fields[0].split(":")[1].strip().isdigit():
            modules.add(fields[2].strip())
    return modules


def _option_modules() -> set[str]:
    """The top-level modules of every distribution an option requires (timm, an extension's tracker's...)."""
    required = {canonicalize_name(d) for g in options.groups() for o in options.options(g).values() for d in o.requires}
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(canonicalize_name(dist) in required for dist in dists)
    }


@pytest.mark.integration  # runs the entry script
def test_cli_cfg_job_prints_the_config_without_importing_torch() -> None:
    every_tracker = f"logger=[{','.join(trackers())}]"  # each chosen: none of them imported yet
    proc = subprocess.run(
        [PYTHON, "-X", "importtime", str(TRAIN_SCRIPT), "--cfg", "job", every_tracker],
        cwd=REPO,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = OmegaConf.create(proc.stdout)
    assert printed.seed == 42 and printed.model.name == "cnn" and printed.optimizer.lr == pytest.approx(3e-3)
    modules = _imported_modules(proc.stderr)
    assert {"hydra", "omegaconf", "lab.config"} <= modules  # the parsing works: these must be there
    assert all(printed.logger.backends.values()) and printed.logger.wandb.mode == "auto"
    heavy_modules = {"torch", "torchvision", "numpy", "wandb", *_option_modules()}
    heavy = sorted(m for m in modules if m.split(".")[0] in heavy_modules)
    assert not heavy, f"--cfg job imported {heavy[:5]}"


@pytest.mark.integration  # runs the entry script
def test_cli_help_lists_groups_and_config() -> None:
    proc = _run_train("--help")
    assert proc.returncode == 0, proc.stderr
    for group in GROUPS:
        assert re.search(rf"^{group}: ", proc.stdout, re.MULTILINE), f"--help does not list the {group} group"
    assert "seed: 42" in proc.stdout


# --------------------------------------------------------------------------- paths and this machine's config
@pytest.mark.parametrize("entry", ["train", "eval", "export", "infer"])
def test_a_local_config_is_composed_last_and_moves_data_and_outputs(tmp_path, entry: str) -> None:
    """conf/local/default.yaml (git-ignored) is this machine's: composed after everything, an experiment included,
    and `paths` leads data.root and the run and sweep dirs."""
    import shutil

    from hydra import compose, initialize_config_dir

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    overrides = {"train": ["experiment=digits_mlp"], "infer": ["ckpt_path=x.pt", "input=a.png"]}.get(
        entry, ["ckpt_path=x.pt"]
    )

    def composed() -> DictConfig:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            return compose(config_name=entry, overrides=overrides, return_hydra_config=True)

    assert composed().paths.outputs == "outputs" and not (conf / "local/default.yaml").exists()
    (conf / "local/default.yaml").write_text(
        "# @package _global_\npaths:\n  data: /mnt/datasets\n  outputs: /mnt/runs\ntags: [this_machine]\n"
        + ("trainer:\n  max_epochs: 3\n" if entry == "train" else "")
    )
    cfg = composed()
    assert cfg.hydra.run.dir.startswith(f"/mnt/runs/{entry}/") and cfg.hydra.sweep.dir.startswith(f"/mnt/runs/{entry}/")
    assert list(cfg.tags) == ["this_machine"]
    if entry == "train":
        assert cfg.data.root == "/mnt/datasets" and cfg.trainer.max_epochs == 3  # digits_mlp's 20 is overridden
    rules = (REPO / ".gitignore").read_text().splitlines()
    assert "/conf/local/*" in rules  # the file never reaches a commit


def test_wandb_keys_from_before_trackers_had_their_own_node_still_run(capsys) -> None:
    from lab.config.trackers import moved_keys

    argv = ["train.py", "logger.mode=offline", "++logger.project=p", "~logger.tags", "-m", "logger.group=a,b"]
    assert moved_keys([*argv, "logger.backends.csv=true", "logger.wandb.entity=e"]) == [
        "train.py",
        "logger.wandb.mode=offline",
        "++logger.wandb.project=p",
        "~logger.wandb.tags",
        "-m",
        "logger.wandb.group=a,b",
        "logger.backends.csv=true",
        "logger.wandb.entity=e",
    ]
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 4 and warnings[0] == (
        "warning: logger.mode is logger.wandb.mode now (each tracker's settings are under logger.<name>)"
    )


def test_hydras_repository_copy_shares_the_config_store_and_leaves_the_original_as_it_was() -> None:
    """lab.config makes Hydra's per-composition copy of its config repository shallow (6 of the 7 s of `--help`
    were deep copies of the ConfigStore): the copy must still be free to take another search path."""
    from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # registers the config sources (file://, structured://), as Hydra's start does

    def search_path(*folders: str) -> ConfigSearchPathImpl:
        path = ConfigSearchPathImpl()
        for folder in folders:
            path.append("main", f"file://{folder}")
        path.append("schema", "structured://")
        return path

    original = ConfigRepository(config_search_path=search_path(str(CONF_DIR)))
    sources = list(original.get_sources())
    copy = CachingConfigRepository(original)
    assert copy.get_schema_source().store is ConfigStore.instance()  # shared, not copied
    assert copy.config_exists("experiment/digits_mlp")  # a preset: conf/experiment/digits_mlp.yaml
    copy.initialize_sources(search_path())  # the stored options only
    assert not copy.config_exists("experiment/digits_mlp") and copy.config_exists("model/mlp")
    assert original.get_sources() == sources and original.config_exists("experiment/digits_mlp")
