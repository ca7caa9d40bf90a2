"""The `logger` node: which trackers record a run, and each tracker's settings.

Each tracker backend is an option of the `tracker` kind, in src/lab/tracking/options.py or an extension's options.py:

    @dataclass
    class AimConfig(TrackerConfig):        # the tracker `aim`: its name is the class's, written once
        repo: str | None = None            # logger.aim.repo=... overrides without `+`
        requires = ("aim",)                # its packages (a pyproject.toml extra): refused by name when missing

        def backend(self):                 # the lab.tracking.Backend class that records, imported only when chosen
            from lab.tracking.aim_backend import AimBackend
            return AimBackend

Trackers are not one-of: a run turns on any number. So every registered tracker gets, with no YAML and no table to
edit, a switch `logger.backends.<name>`, a settings node `logger.<name>` typed by its option (its backend gets it as
`RunInfo.settings`) and a preset `logger=<name>` turning its switch on (`logger=[wandb,csv]`, `logger=none`). A tracker
may not be named like a key of `LoggerConfig`, nor `none`. This module imports no torch and no tracker.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lab.config import options
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.options import Option


@dataclass
class TrackerConfig(Option, group="tracker", key=""):
    """Base of every tracker's settings (`logger.<name>`); each subclass is a tracker."""

    def backend(self) -> type[Any]:
        """Import and return the `lab.tracking.backends.Backend` subclass that records for this tracker."""
        raise NotImplementedError(f"{type(self).__name__} has no backend()")

    @classmethod
    def stored_as(cls, name: str) -> tuple[str, Any]:
        """Return the preset `logger=<name>` of the logger group, which turns this tracker on."""
        return "logger", {"backends": {name: True}}

    def key_of(self, key: str) -> str:
        """Return the full name of `key` for messages: `logger.<name>.<key>`."""
        return f"logger.{options.option_name(type(self))}.{key}"


def trackers() -> dict[str, type[TrackerConfig]]:
    return options.options("tracker")  # type: ignore[return-value]


@dataclass
class LoggerConfig:
    """What every tracker shares; `logger_schema` adds a `logger.<name>` node per tracker. The run dir's
    metrics.jsonl, summary.json and provenance/ are written whichever trackers are on."""

    # {tracker: on}, a key per registered tracker. Set by logger=wandb (default) | csv | <another> | none, a list
    # (logger=[wandb,csv]), or logger.backends.<name>=true|false on top of what is chosen.
    backends: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(trackers(), False))
    log_checkpoints: str = "none"  # none | best | last: keep that checkpoint with the run (wandb: a model artifact)
    # A tracker that is slow to start (wandb: ~1 s of Python) runs in a child process, on another core. false runs it
    # in this process, e.g. to call wandb.log or use wandb.run from your own code.
    child_process: bool = True

    def __post_init__(self) -> None:
        known = trackers()
        for name in self.backends:
            _require(
                name in known,
                f"logger.backends.{name} is not a tracker; choose among {', '.join(known)}: "
                f"logger=[{','.join(known)}] (or logger=none); a new one is a TrackerConfig "
                "in src/lab/tracking/options.py",
            )
        _one_of("logger.log_checkpoints", self.log_checkpoints, ("none", "best", "last"))
        for name in chosen(self):
            settings = getattr(self, name, None)  # LoggerConfig alone has no settings nodes: use the defaults
            (settings if isinstance(settings, TrackerConfig) else known[name]()).check_installed()


def logger_schema() -> type[LoggerConfig]:
    """Return LoggerConfig with a `logger.<name>` node per tracker (`none` is reserved for `logger=none`)."""
    return options.node_per_option(LoggerConfig, "tracker", "logger", "TrackingConfig", reserved=("none",))


def logger_config(**values: Any) -> LoggerConfig:
    """Return the `logger` node's defaults with `values` set; entry configs use it as their field default."""
    return logger_schema()(**values)


def chosen(logger: Any) -> list[str]:
    """Return the trackers a `logger` node (a DictConfig, a dataclass or None) turns on, in order."""
    return [str(name) for name, on in (_get(logger, "backends") or {}).items() if on]


def tracker_settings(logger: Any, name: str) -> TrackerConfig:
    """Return the checked settings of tracker `name` from a `logger` node, or the option's defaults if it has none."""
    cls = options.option_class("tracker", name)
    assert issubclass(cls, TrackerConfig)  # as every tracker option is
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


# wandb's settings sat at the top of `logger` before each tracker had its own node. An old command line
# (logger.mode=offline) still runs, moved to the new key with one warning line.
MOVED_KEYS = {
    f"logger.{key}": f"logger.wandb.{key}" for key in ("mode", "project", "entity", "group", "tags", "init_timeout")
}


def moved_keys(argv: list[str]) -> list[str]:
    """Return `argv` with MOVED_KEYS renamed, keeping `+`/`++`/`~` prefixes, and warn on stderr for each."""
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
