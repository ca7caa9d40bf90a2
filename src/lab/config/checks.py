"""Value checks for the schemas' ``__post_init__``: each failure is one ConfigError naming the key and the fix."""

from __future__ import annotations

from omegaconf import MISSING

from lab.errors import ConfigError


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def one_of(key: str, value: str, options: tuple[str, ...]) -> None:
    if isinstance(value, str) and value.startswith("${"):
        return  # a schema default that interpolates another key (${task.mode}): checked once resolved
    require(value in options, f"{key}={value!r} is not valid; choose one of {', '.join(options)}")


def fixed_default(config: object, key: str) -> object | None:
    """The default the config's own dataclass gives `key` (e.g. the `name` of a per-option schema), or None when
    that dataclass leaves it mandatory (a base schema)."""
    default = type(config).__dataclass_fields__[key].default  # type: ignore[attr-defined]
    return None if default == MISSING else default


def own_choice(config: object, group: str, key: str, noun: str) -> None:
    """A per-option schema fixes `key` (the scheduler's name, the dist strategy): changing it would leave the other
    option's keys behind, so another option is chosen with `<group>=<option>`, which brings its own keys."""
    own, value = fixed_default(config, key), getattr(config, key)
    require(
        own is None or value == own,
        f"{group}.{key}={value!r} on the {own} {noun}'s config: choose a {noun} with {group}=<name> (which brings "
        f"that {noun}'s keys), not with {group}.{key}",
    )
