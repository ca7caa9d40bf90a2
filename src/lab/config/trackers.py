"""The `logger` node: which trackers record a run, and each tracker's settings. One option per tracker backend
(lab.config.options), in the `tracker` kind, in a module of src/lab/config/ or an extension's options.py
(lab.extensions); in short:

    @dataclass
    class AimConfig(TrackerConfig):        # the tracker `aim`: its name is the class's, written once
        repo: str | None = None            # logger.aim.repo=... overrides without `+`
        requires = ("aim",)                # its packages (an extra of pyproject.toml): refused by name when missing

        def backend(self):                 # the lab.tracking.Backend class that records (imported only when chosen)
            from lab.tracking.aim_backend import AimBackend
            return AimBackend

Trackers are not one-of like `model=`: a run turns on any number of them. So every registered tracker gets, with
no YAML and no table to edit:

- a switch `logger.backends.<name>` (true: it records this run), in the order of their names;
- a settings node `logger.<name>`, typed by its option (unknown keys and wrong types fail while composing);
- a preset `logger=<name>` turning its switch on (stored by :func:`lab.config.register`): `logger=[wandb,csv]`
  merges several, `logger=none` turns every one off.

The backend itself gets its settings object as ``RunInfo.settings`` (lab.tracking.backends). The keys of
:class:`LoggerConfig` are about every tracker; a tracker may not be named like one of them, nor `none`. This
module imports no torch (and no tracker): an option's ``backend()`` imports its class.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from lab.config import options
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.checks import wandb_project, wandb_tags
from lab.config.options import Option

if TYPE_CHECKING:
    from lab.tracking.backends import Backend


@dataclass
class TrackerConfig(Option, group="tracker", key=""):
    """Base of every tracker's settings (`logger.<name>`): a subclass is a tracker."""

    def backend(self) -> type[Backend]:
        """The ``lab.tracking.backends.Backend`` subclass that records for this tracker (imported now)."""
        raise NotImplementedError(f"{type(self).__name__} has no backend()")

    @classmethod
    def stored_as(cls, name: str) -> tuple[str, Any]:
        """`logger=<name>`: a preset of the logger group turning this tracker on (a list merges several)."""
        return "logger", {"backends": {name: True}}

    def key_of(self, key: str) -> str:
        """The full name of one of its keys in messages: `logger.<name>.<key>`."""
        return f"logger.{options.option_name(type(self))}.{key}"


def trackers() -> dict[str, type[TrackerConfig]]:
    """Every registered tracker, by name."""
    return options.options("tracker")  # type: ignore[return-value]


# --------------------------------------------------------------------------- the shipped trackers
@dataclass
class WandbConfig(TrackerConfig):
    """Weights & Biases (lab.tracking.wandb_backend). Offline unless credentials exist (`wandb login` or
    WANDB_API_KEY); sync later with `wandb sync`. WANDB_MODE / WANDB_PROJECT / WANDB_ENTITY / WANDB_DIR are honoured
    when mode/project/entity are left at auto/null."""

    mode: str = "auto"  # auto: online when credentials exist (WANDB_API_KEY or netrc), else offline | WANDB_MODE
    project: str | None = None  # null: $WANDB_PROJECT, else "lab"
    entity: str | None = None  # null: $WANDB_ENTITY or your default entity
    group: str | None = None  # null: the sweep's name for multirun jobs
    tags: list[str] = field(default_factory=list)  # added to the top-level `tags`
    init_timeout: float = 30.0  # seconds to reach the server before falling back to offline

    def __post_init__(self) -> None:
        _one_of(self.key_of("mode"), self.mode, ("auto", "online", "offline", "disabled"))
        _require(self.init_timeout > 0, f"{self.key_of('init_timeout')} must be > 0, got {self.init_timeout}")
        wandb_tags(self.key_of("tags"), self.tags)
        wandb_project(self.key_of("project"), self.project)

    def backend(self) -> type[Backend]:
        from lab.tracking.wandb_backend import WandbBackend

        return WandbBackend


@dataclass
class CsvTrackerConfig(TrackerConfig, name="csv"):  # `CsvConfig` is the data option `data=csv`
    """Plain files (lab.tracking.csv_backend): <run dir>/csv/metrics.csv (one row per event; a column per metric,
    added as metrics appear) and csv/config.yaml (the resolved config with the git commit)."""

    def backend(self) -> type[Backend]:
        from lab.tracking.csv_backend import CsvBackend

        return CsvBackend


# --------------------------------------------------------------------------- the logger node
@dataclass
class LoggerConfig:
    """What every tracker shares. The run dir's metrics.jsonl / summary.json / provenance/ are written whatever is
    chosen. The composed node is :func:`logger_schema`: this plus `logger.<name>` per tracker."""

    # {tracker: on}, a key per registered tracker: logger=wandb (default) | csv | <another tracker> | none, a list
    # of them (logger=[wandb,csv]), or logger.backends.<name>=true|false on top of what is chosen
    backends: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(trackers(), False))
    log_checkpoints: str = "none"  # none | best | last: keep that checkpoint with the run (wandb: a model artifact)
    # a tracker that is slow to start (wandb: ~1 s of Python) runs in a child process, using another core. false: in
    # this process (e.g. to call wandb.log or use wandb.run from your own code)
    child_process: bool = True

    def __post_init__(self) -> None:
        known = trackers()
        for name in self.backends:
            _require(
                name in known,
                f"logger.backends.{name} is not a tracker; choose among {', '.join(known)}: "
                f"logger=[{','.join(known)}] (or logger=none); a new one is a TrackerConfig in src/lab/config/",
            )
        _one_of("logger.log_checkpoints", self.log_checkpoints, ("none", "best", "last"))
        for name in chosen(self):
            settings = getattr(self, name, None)  # LoggerConfig alone (no settings nodes): the defaults
            (settings if isinstance(settings, TrackerConfig) else known[name]()).check_installed()


def logger_schema() -> type[LoggerConfig]:
    """LoggerConfig with a node `logger.<name>` per registered tracker, typed by its option: the type of every entry
    config's `logger` (options.node_per_option; `none` is taken by `logger=none`)."""
    return options.node_per_option(LoggerConfig, "tracker", "logger", "TrackingConfig", reserved=("none",))


def logger_config(**values: Any) -> LoggerConfig:
    """The `logger` node's defaults (the field default of every entry config), or those `values` set."""
    return logger_schema()(**values)


def chosen(logger: Any) -> list[str]:
    """The trackers a `logger` config node (a DictConfig, a dataclass or None) turns on, in its order."""
    return [str(name) for name, on in (_get(logger, "backends") or {}).items() if on]


def tracker_settings(logger: Any, name: str) -> TrackerConfig:
    """The settings object of the tracker `name` in a `logger` node: its `logger.<name>` values checked by its
    option (a node without them, or none at all: the option's defaults)."""
    cls = options.option_class("tracker", name)
    assert issubclass(cls, TrackerConfig)  # the tracker group's options are
    node = _get(logger, name)
    if node is None:
        return cls()
    if isinstance(node, cls):
        return node
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))  # type: ignore[return-value]


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    return node.get(key) if hasattr(node, "get") else getattr(node, key, None)


# wandb's settings sat at the top of `logger` before each tracker had its own node: a command line written then
# (logger.mode=offline) still runs, moved to the new key with one warning line
MOVED_KEYS = {
    f"logger.{key}": f"logger.wandb.{key}" for key in ("mode", "project", "entity", "group", "tags", "init_timeout")
}


def moved_keys(argv: list[str]) -> list[str]:
    """The command line with the keys of MOVED_KEYS under their new names (`+`/`++`/`~` prefixes kept)."""
    renamed = []
    for arg in argv:
        rest = arg.lstrip("+~")
        prefix = arg[: len(arg) - len(rest)]
        key, sep, value = rest.partition("=")
        if key in MOVED_KEYS:
            print(
                f"warning: {key} is {MOVED_KEYS[key]} now (each tracker's settings are under logger.<name>)",
                file=sys.stderr,
            )
            arg = f"{prefix}{MOVED_KEYS[key]}{sep}{value}"
        renamed.append(arg)
    return renamed
