"""The private APIs of lab.upstream against the installed Hydra and torch: when an upgrade moves or changes one, the
test of its function fails here, naming it, instead of a run failing somewhere else (docs/architecture.md lists
them with why)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lab import upstream


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_hydra_run_job_is_wrapped_and_restored():
    from hydra._internal import hydra as hydra_internal

    assert {"hydra_context", "config", "task_function"} <= set(parameters(hydra_internal.run_job)), (
        "hydra._internal.hydra.run_job changed: update lab.upstream.hydra_run_job_wrapped"
    )
    original, seen = hydra_internal.run_job, []
    with upstream.hydra_run_job_wrapped(lambda run_job: seen.append(run_job) or "wrapped"):
        assert hydra_internal.run_job == "wrapped" and seen == [original]
    assert hydra_internal.run_job is original


def test_hydra_report_is_wrapped_and_restored():
    from hydra._internal import utils as hydra_utils

    assert parameters(hydra_utils.run_and_report) == ["func"], "update lab.upstream.hydra_report_wrapped"
    original = hydra_utils.run_and_report
    with upstream.hydra_report_wrapped(lambda func: ("checked", func())):
        assert hydra_utils.run_and_report(lambda: 7) == ("checked", 7)
    assert hydra_utils.run_and_report is original


def test_hydras_args_parser_reads_overrides_and_multirun():
    args = upstream.hydra_args_parser().parse_args(["-m", "a=1", "b=x,y"])
    assert args.multirun is True and args.overrides == ["a=1", "b=x,y"], "update lab.upstream.hydra_args_parser"


def test_hydras_overrides_apply_to_a_config():
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    config = OmegaConf.create({"a": 1, "b": {"c": 2}})
    upstream.hydra_apply_overrides(OverridesParser.create().parse_overrides(["a=3", "b.c=4", "+d=5"]), config)
    assert OmegaConf.to_container(config) == {"a": 3, "b": {"c": 4}, "d": 5}, (
        "update lab.upstream.hydra_apply_overrides"
    )


def test_hydras_basic_sweeper_has_what_the_grid_sweeper_extends():
    from hydra.plugins.sweeper import Sweeper

    sweeper = upstream.hydra_basic_sweeper()
    assert issubclass(sweeper, Sweeper) and parameters(sweeper.__init__) == ["self", "max_batch_size", "params"]
    assert callable(sweeper._parse_config) and callable(sweeper.setup), "update the grid sweeper"


def test_hydras_config_repository_is_copied_shallowly():
    """lab.config applied it at import: a copy of the repository shares the sources (and the ConfigStore)."""
    from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository

    assert parameters(ConfigRepository.__init__) == ["self", "config_search_path"]
    delegate = ConfigRepository.__new__(ConfigRepository)
    delegate.sources = [object()]
    copied = CachingConfigRepository(delegate)
    assert copied.delegate is not delegate and copied.delegate.sources is delegate.sources and copied.cache == {}


def _hydra_app_run(conf: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, int]:
    """Run a Hydra app in this process; return its config and Hydra's node, as YAML, and how many times it composed."""
    import hydra
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    seen, compositions = [], []
    compose = ConfigLoaderImpl._load_configuration_impl
    monkeypatch.setattr(
        ConfigLoaderImpl, "_load_configuration_impl", lambda *a, **k: compositions.append(1) or compose(*a, **k)
    )

    def task(cfg: Any) -> None:
        hydra_node = OmegaConf.to_yaml(HydraConfig.get())
        seen.append((OmegaConf.to_yaml(cfg), hydra_node.replace(str(conf), "<conf>")))

    monkeypatch.setattr("sys.argv", ["app.py", *argv])
    hydra.main(config_path=str(conf), config_name="app", version_base=None)(task)()
    return (*seen[0], len(compositions))


def test_a_single_run_is_composed_once_into_the_config_hydra_composes_twice(tmp_path, monkeypatch):
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra

    assert parameters(Hydra.get_mode) == ["self", "config_name", "overrides"], "update hydra_run_composed_once"
    assert parameters(ConfigLoaderImpl.load_configuration)[:4] == ["self", "config_name", "overrides", "run_mode"]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "small.yaml").write_text("width: 3\n")
    (tmp_path / "app.yaml").write_text("defaults:\n  - model: small\n  - _self_\nlr: 0.1\n")
    monkeypatch.chdir(tmp_path)
    argv = ["lr=0.2", "+model.depth=2", f"hydra.run.dir={tmp_path / 'run'}"]
    config, hydra_node, compositions = _hydra_app_run(tmp_path, argv, monkeypatch)
    assert compositions == 2  # Hydra's own: get_mode's and run's
    with upstream.hydra_run_composed_once():
        assert _hydra_app_run(tmp_path, argv, monkeypatch) == (config, hydra_node, 1)
    assert "hydra.mode=RUN" in hydra_node and "depth: 2" in config
    with upstream.hydra_run_composed_once(), pytest.raises(SystemExit):  # Hydra's own report of a composing error
        _hydra_app_run(tmp_path, ["model=large"], monkeypatch)
    assert (
        Hydra.get_mode.__name__ == "get_mode" and ConfigLoaderImpl.load_configuration.__name__ == "load_configuration"
    )


@dataclass
class Probe:  # module-level, so a pickled config finds it
    width: int = 3


def test_a_deferred_store_entry_is_listed_and_made_once_when_first_loaded(monkeypatch):
    import pickle

    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    made = []
    structured = OmegaConf.structured
    monkeypatch.setattr(OmegaConf, "structured", lambda schema: made.append(schema) or structured(schema))
    store = ConfigStore.instance()
    monkeypatch.setattr(store, "repo", {})
    upstream.hydra_store_deferred("probe", Probe, group="lab_test/deep", package="elsewhere")
    assert store.list("lab_test/deep") == ["probe.yaml"] and made == [], "update lab.upstream.hydra_store_deferred"
    first = store.load("lab_test/deep/probe.yaml")
    first.node.width = 5  # a composition's changes stay in its own copy
    second = store.load("lab_test/deep/probe.yaml")
    assert made == [Probe] and OmegaConf.get_type(second.node) is Probe and second.node.width == 3
    assert (second.name, second.group, second.package) == ("probe.yaml", "lab_test/deep", "elsewhere")
    sent = pickle.loads(pickle.dumps(store.repo))  # a launcher's workers receive the store pickled
    assert sent["lab_test"]["deep"]["probe.yaml"].node == second.node and made == [Probe]


@dataclass
class Unheld:  # a field type OmegaConf cannot hold
    sizes: set = field(default_factory=set)


def test_a_deferred_entry_omegaconf_cannot_hold_is_refused_naming_the_option_when_chosen(monkeypatch):
    from hydra.core.config_store import ConfigStore

    from lab.errors import ConfigError

    store = ConfigStore.instance()
    monkeypatch.setattr(store, "repo", {})
    upstream.hydra_store_deferred("unheld", Unheld, group="model")  # refused only when a run chooses it
    with pytest.raises(ConfigError, match=r"^model=unheld: .*set \(\S*Unheld\.sizes\); type its"):
        store.load("model/unheld.yaml")


def test_torchs_elastic_signal_handler_is_wrapped_and_restored():
    from torch.distributed.elastic.multiprocessing import api

    original = api._terminate_process_handler
    assert parameters(original) == ["signum", "frame"], "update lab.upstream.torch_elastic_signal_handler_wrapped"
    with upstream.torch_elastic_signal_handler_wrapped(lambda handler: ("first only", handler)):
        assert api._terminate_process_handler == ("first only", original)
    assert api._terminate_process_handler is original


def test_torchs_spawn_wait_is_capped_and_restored():
    from torch.multiprocessing.spawn import ProcessContext

    join = ProcessContext._join_procs_with_timeout
    assert parameters(join) == ["self", "timeout"], "update lab.upstream.torch_spawn_waits_capped"
    waits: list[float] = []
    try:
        ProcessContext._join_procs_with_timeout = lambda context, timeout: waits.append(timeout)
        with upstream.torch_spawn_waits_capped(10):
            ProcessContext._join_procs_with_timeout(None, 30.0)
            ProcessContext._join_procs_with_timeout(None, 2.0)
    finally:
        ProcessContext._join_procs_with_timeout = join
    assert waits == [10, 2.0]


def test_torchs_loader_sigchld_flag_keeps_its_handler_out():
    from torch.utils.data._utils import signal_handling

    assert hasattr(signal_handling, "_SIGCHLD_handler_set"), "update lab.upstream.torch_loader_sigchld_handler_kept_out"
    before, signal_handling._SIGCHLD_handler_set = signal_handling._SIGCHLD_handler_set, False
    try:
        upstream.torch_loader_sigchld_handler_kept_out()
        assert signal_handling._SIGCHLD_handler_set is True
    finally:
        signal_handling._SIGCHLD_handler_set = before


PRIVATE = ("hydra._internal", "_join_procs_with_timeout", "_terminate_process_handler", "_SIGCHLD_handler_set")


def test_no_other_module_reaches_into_a_private_api():
    src = Path(upstream.__file__).parents[1]
    for path in src.rglob("*.py"):
        if path != Path(upstream.__file__) and "/tests/" not in str(path):
            text = path.read_text()
            assert not [name for name in PRIVATE if name in text], f"{path}: a private API outside lab.upstream"
