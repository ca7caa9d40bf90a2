"""An *option* is a dataclass that subclasses its kind's base config and builds its component.

    @dataclass
    class Unet(ModelConfig):          # the option `model=unet`: its name is the class's, written once
        width: int = 32               # its keys and defaults: `model.width=64` overrides without `+`

        def build(self, meta):        # what it makes (imported here: a config module never imports torch)
            from lab.models.unet import UNet
            return UNet(self.width, meta["num_outputs"])

Subclassing registers it, and `lab.config.register` stores it in Hydra's ConfigStore as `<group>/<name>`: Hydra
types the group's node by it, no YAML needed (a YAML in `conf/<group>/` is a *preset*: `defaults: [<option>]` plus
what differs). Its name is the class name in snake_case without a `Config` suffix (`ImageFolder` -> `image_folder`),
or `name=` in the class line (`none` is a Python word). A kind's base says `group=`, a shared intermediate class
`abstract=True`. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lab import extras
from lab.errors import ConfigError

_KINDS: dict[str, type[Option]] = {}  # group -> the kind's base class
_OPTIONS: dict[str, dict[str, type[Option]]] = {}  # group -> option name -> class


class Option:
    """Base of every kind's config (`ModelConfig`, `DataConfig`, ...); see the module docstring."""

    # model | data | task | optimizer | scheduler | dist | tracker. Not called `group` because an option may have a
    # key of that name (wandb's does).
    config_group: ClassVar[str] = ""
    # The node's key holding the option's name (dist calls it `strategy`). "" for a kind whose node never says which
    # option it is: a tracker's settings sit under `logger.<its name>`.
    key: ClassVar[str] = "name"
    # Where a chosen option lands if not in its group's node. A kind of which several may be on at once gives each
    # its own node ("callbacks.{name}").
    package: ClassVar[str | None] = None
    # Distributions it needs beyond the core (pyproject.toml's extras). Choosing it without them fails the config
    # check, naming the extra to install (lab.extras).
    requires: ClassVar[tuple[str, ...]] = ()
    # What a run choosing it passes beside it: its mandatory values, a task it needs (`("task=multi_label",)`).
    # The suite composes and validates every option with these and the other groups' defaults
    # (tests/unit/config/test_config.py), so an option that needs a companion keeps a fork's fast tier green.
    example_overrides: ClassVar[tuple[str, ...]] = ()
    if TYPE_CHECKING:  # every option is a dataclass (its kind's base is one)
        __dataclass_fields__: ClassVar[dict[str, Any]]

    def __init_subclass__(
        cls,
        group: str = "",
        key: str | None = None,
        name: str = "",
        abstract: bool = False,
        package: str = "",
        **kw: Any,
    ) -> None:
        super().__init_subclass__(**kw)
        if group:  # a kind's base, not an option itself
            cls.config_group, cls.package = group, package or None
            if key is not None:
                cls.key = key
            _KINDS[group] = cls
            _OPTIONS.setdefault(group, {})
            return
        if abstract:
            return
        name = name or snake_case(re.sub(r"Config$", "", cls.__name__))
        # The option's name becomes the default of its name key. The dataclass decorator, which runs next, reads it
        # from this class's own annotations and keeps the field where the kind's base declared it.
        if cls.key:
            cls.__annotations__ = {**inspect.get_annotations(cls), cls.key: "str"}
            setattr(cls, cls.key, name)
        previous = _OPTIONS[cls.config_group].get(name)
        # Re-importing the same module (reloads, notebooks) is harmless. Two classes claiming one name is a bug
        # that would otherwise silently pick whichever module was imported last.
        if previous is not None and _qualified(previous) != _qualified(cls):
            raise ValueError(f"{cls.config_group} option {name!r} is already defined by {_qualified(previous)}")
        _OPTIONS[cls.config_group][name] = cls

    @classmethod
    def stored_as(cls, name: str) -> tuple[str, Any] | None:
        """Return the (group, node) under which `lab.config.register` stores the option `name` in the ConfigStore; a
        kind whose options are not one-of overrides this, None meaning not stored (every export step is present)."""
        return cls.config_group, cls

    def conflict(self, run: Any) -> str | None:
        """Return why this option cannot work with the rest of the checked config it was chosen in (`run`: a run's
        `TrainConfig`, or the `export` node for an export step), refusing it before any work, or None."""
        return None

    def check_installed(self) -> None:
        """Refuse this option, naming the extra to install, when a distribution of `requires` is missing."""
        if self.requires:
            name = option_name(type(self)) or type(self).__name__
            stored = self.stored_as(name)  # what the command line says: model=timm, logger=<name>
            extras.require(f"{stored[0] if stored else self.config_group}={name}", self.requires)

    def __post_init__(self) -> None:
        if not self.key:  # a tracker: each has a settings node, and the logger checks those turned on
            return
        self.check_installed()
        own = option_name(type(self))
        chosen = getattr(self, self.key)
        if own is not None and chosen != own:
            group = self.config_group
            raise ConfigError(
                f"{group}.{self.key}={chosen!r} on the {own} {group} config: choose another with "
                f"{group}=<name> (which brings that option's keys), not with {group}.{self.key}"
            )


def snake_case(name: str) -> str:
    """Convert `ImageFolder` -> `image_folder`, `CNN` -> `cnn`, `Cifar10` -> `cifar10`, `MyCNN` -> `my_cnn`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def option_name(cls: type) -> str | None:
    """Return a registered option class's name, or None for a kind's base or an abstract class."""
    for name, option in _OPTIONS.get(getattr(cls, "config_group", ""), {}).items():
        if option is cls:
            return name
    return None


def options(group: str) -> dict[str, type[Option]]:
    """Return every option of `group` by name, as `<group>=<name>` chooses it."""
    return dict(sorted(_OPTIONS.get(group, {}).items()))


def groups() -> list[str]:
    return sorted(_OPTIONS)


def package(group: str, name: str) -> str | None:
    """Return where the option `name` of `group` lands when chosen, or None for the group's own node."""
    pattern = _KINDS[group].package
    return pattern.format(name=name) if pattern else None


def option_class(group: str, name: str | None) -> type[Option]:
    found = _OPTIONS.get(group, {})
    if name not in found:
        close = difflib.get_close_matches(str(name), found, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"{group}={name} is not an option of {group}; {hint}choose one of {', '.join(sorted(found))} (a new one "
            f"is a dataclass extending the {group} base config in a module of src/lab/config/)"
        )
    return found[name]


def instantiate(group: str, node: Any, drop_unknown: bool = False) -> Any:
    """Build the option object for a config node of `group` (composed, or the dict a checkpoint saved), checking its
    values. With `drop_unknown`, keys the option no longer declares are dropped: older configs still load."""
    if isinstance(node, Option):
        return node
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    assert isinstance(values, dict)  # a DictConfig's container is a dict
    name = values.get(_KINDS[group].key)
    cls = option_class(group, name)
    if drop_unknown:
        declared = set(cls.__dataclass_fields__)
        values = {k: v for k, v in values.items() if k in declared}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))
    except ConfigError:
        raise
    except OmegaConfBaseException as err:
        raise ConfigError(f"{group}: {str(err).splitlines()[0]} (the {name} options)") from err


_NODE_SCHEMAS: dict[tuple[type, tuple[tuple[str, type], ...]], type] = {}


def node_per_option(base: type, group: str, node: str, schema_name: str, reserved: tuple[str, ...] = ()) -> type:
    """Extend `base` with a node per option of `group`, named and typed by it (`logger.wandb`, `export.int8`), for
    kinds whose options are all present at once. Made once per set of options and kept in `base`'s module as
    `schema_name`, so a pickled config finds its class."""
    found = tuple(options(group).items())
    if (base, found) not in _NODE_SCHEMAS:
        taken = {f.name for f in dataclasses.fields(base)} | set(reserved)
        clash = [name for name, _ in found if name in taken]
        if clash:
            what = group.replace("_", " ")
            raise ValueError(f"{what} {clash[0]!r} is named like a key of {node}; name its option otherwise")
        schema = dataclasses.make_dataclass(
            schema_name, [(name, option, dataclasses.field(default_factory=option)) for name, option in found],
            bases=(base,),
        )  # fmt: skip
        schema.__module__, schema.__doc__ = base.__module__, base.__doc__
        _NODE_SCHEMAS[(base, found)] = schema
    schema = _NODE_SCHEMAS[(base, found)]
    setattr(sys.modules[base.__module__], schema_name, schema)
    return schema


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
