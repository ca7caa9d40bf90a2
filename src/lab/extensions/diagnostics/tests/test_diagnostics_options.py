"""The diagnostics options: the debug presets turn their callbacks on, bad values and statistics under FSDP are refused
before any work, and only rank 0 profiles and collects statistics."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from lab.config import ConfigError, validate
from lab.extensions.diagnostics.options import AnomalyConfig, ProfileConfig, StatsConfig


def test_the_debug_presets_turn_their_callbacks_on(compose) -> None:
    cfg = compose(["debug=[fast,anomaly]"])
    assert set(cfg.callbacks) == {"anomaly"} and cfg.trainer.limit_train_batches == 3
    cfg = compose(["experiment=char_lm", "debug=profile", "callbacks.profile.active=5", "callback=stats"])
    assert set(cfg.callbacks) == {"profile", "stats"} and cfg.callbacks.profile.active == 5
    assert cfg.trainer.limit_train_batches == 10 and list(cfg.tags) == ["debug", "profile"]
    validate(cfg)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["callback=profile", "callbacks.profile.active=0"], "callbacks.profile.active must be >= 1, got 0"),
        (["callback=stats", "callbacks.stats.every_n_steps=0"], "callbacks.stats.every_n_steps must be >= 1, got 0"),
        (["callback=stats", "dist=fsdp"], "callback=stats does not work with dist=fsdp (each rank holds only a shard"),
    ],
)
def test_bad_values_and_statistics_under_fsdp_are_refused(compose, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        validate(compose(overrides))
    validate(compose(["callback=stats", "dist=ddp"]))  # DDP's gradients are whole on every rank


def test_only_rank_0_profiles_and_collects_statistics() -> None:
    other_rank = SimpleNamespace(parallel=SimpleNamespace(is_main=False))
    assert ProfileConfig().build(other_rank) is None and StatsConfig().build(other_rank) is None
    assert AnomalyConfig().build(other_rank) is not None  # every rank checks its own batches
