"""Shared fixtures. Importing ``helpers`` imports ``lab.config`` before any test composes a config: that import
registers the schemas in Hydra's ConfigStore, which every conf/<group>/*.yaml extends."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from omegaconf import DictConfig

from helpers import REPO, compose_config
from lab import extras
from tiers import PROCESS_STARTERS, is_integration, refuser

ComposeFn = Callable[..., DictConfig]
# a developer's .env (tracker credentials) must not reach the tests: they expect offline wandb, as on CI
os.environ["NO_DOTENV"] = "1"
# One OpenMP thread per process unless the developer set it: `make test` runs two xdist workers, each starting
# training processes (a DDP job: two ranks), and torch's default of a thread per core oversubscribes the CPU; the
# spinning threads then slow the tiny models' steps several times over (measured on 2 cores: a debug=fast run 25 s
# -> 17 s, a step loop 4 -> 90 steps/s). Set before torch is imported here; every subprocess inherits it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_integration(Path(item.path)):
            item.add_marker(pytest.mark.integration)
    # the `longest` first: started last, one would run on alone after every other test had finished
    items.sort(key=lambda item: item.get_closest_marker("longest") is None)


_CALL_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    return report


@pytest.fixture(autouse=True)
def fast_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str] | None]:
    """Keeps the fast tier honest (tests/tiers.py): outside `integration`, starting a process raises ProcessStarted,
    and a test whose code caught that error still fails, at teardown. Yields the attempts (None in integration)."""
    if request.node.get_closest_marker("integration") is not None:
        yield None
        return
    # torch's first import looks for CUDA's libraries with `ldconfig -p`: a process, but torch's, not the test's;
    # whichever test of a worker imports torch first would fail
    import torch  # noqa: F401

    started: list[str] = []
    for owner, name, what in PROCESS_STARTERS:
        monkeypatch.setattr(owner, name, refuser(started, request.node.nodeid, what))
    yield started
    if started and request.node.stash.get(_CALL_PASSED, False):
        pytest.fail(f"a fast-tier test started a process ({'; '.join(started)}): mark it integration", False)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Every test starts with the environment the session started with. Code under test writes os.environ itself
    (SLURM's variables become RANK/WORLD_SIZE, a sweep job's CUDA_VISIBLE_DEVICES), and a later test in the same
    xdist worker would then believe it runs under torchrun; which tests share a worker depends on the scheduling."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def compose() -> ComposeFn:
    """``compose(overrides=(), config_name="train")`` -> the composed (not yet validated) DictConfig.

    Each call runs inside ``hydra.initialize_config_dir``, so no global Hydra state outlives it.
    """
    return compose_config


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``without(*dists)``: pretend those distributions are not installed (what `make install EXTRAS=` leaves out)."""

    def hide(*dists: str) -> None:
        real = extras.installed
        monkeypatch.setattr(extras, "installed", lambda dist: dist not in dists and real(dist))

    return hide
