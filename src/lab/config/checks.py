"""Value checks for the schemas' ``__post_init__``: each failure is one ConfigError naming the key and the fix."""

from __future__ import annotations

from lab.errors import ConfigError


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def one_of(key: str, value: object, options: tuple[str, ...]) -> None:
    if isinstance(value, str) and value.startswith("${"):
        return  # a schema default that interpolates another key (${task.mode}): checked once resolved
    require(value in options, f"{key}={value!r} is not valid; choose one of {', '.join(options)}")


def at_least(key: str, value: float | None, low: float, *, strict: bool = False, or_null: bool = False) -> None:
    """Require `value >= low` (`> low` if strict), or None if `or_null`; NaN always fails."""
    ok = (or_null and value is None) or (value is not None and (value > low if strict else value >= low))
    require(ok, f"{key} must be {'>' if strict else '>='} {low}{' or null' if or_null else ''}, got {value}")


def in_range(
    key: str, value: float, low: float, high: float, *, open_low: bool = False, open_high: bool = False, hint: str = ""
) -> None:
    """Require `low <= value <= high`, either end optionally open; NaN always fails, as its comparisons are False."""
    above = value > low if open_low else value >= low
    below = value < high if open_high else value <= high
    span = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    require(above and below, f"{key} must be in {span}, got {value}{f' ({hint})' if hint else ''}")


def seed(key: str, value: int) -> None:
    # numpy's RandomState, which lab.runtime.seed_everything seeds, takes seeds 0 .. 2**32 - 1 only
    require(0 <= value <= 2**32 - 1, f"{key} must be in [0, 2**32 - 1] (the seeds numpy takes), got {value}")


# wandb refuses a run whose tag is empty or longer than this (validate_run_tags). Checking here fails in seconds
# rather than after the data and model are built.
WANDB_TAG_MAX = 64
_WANDB_PROJECT_MAX = 128  # also from wandb (validate_project), like the forbidden characters below
_WANDB_PROJECT_FORBIDDEN = "/\\#?%:"


def wandb_tags(key: str, tags: list[str]) -> None:
    for index, tag in enumerate(tags):
        shown = tag if len(tag) <= 40 else f"{tag[:37]}..."
        require(
            1 <= len(tag) <= WANDB_TAG_MAX,
            f"{key}[{index}]={shown!r} has {len(tag)} characters; wandb takes tags of 1 to {WANDB_TAG_MAX} characters"
            + (": shorten it" if tag else ": drop it"),
        )


def wandb_project(key: str, project: str | None) -> None:
    if not project:
        return  # null or '' means $WANDB_PROJECT, else the default (lab.tracking.wandb_backend)
    forbidden = sorted({c for c in project if c in _WANDB_PROJECT_FORBIDDEN})
    require(
        len(project) <= _WANDB_PROJECT_MAX and not forbidden,
        f"{key}={project[:40]!r} is not a wandb project name: 1 to {_WANDB_PROJECT_MAX} characters, none of "
        f"{' '.join(_WANDB_PROJECT_FORBIDDEN)}" + (f" (it has {' '.join(forbidden)})" if forbidden else ""),
    )
