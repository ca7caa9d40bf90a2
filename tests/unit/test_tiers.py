"""The fast tier starts no process (tests/tiers.py, tests/conftest.py): a test that does fails there, even when the
code under test catches the error; integration tests, marked where they are or by their folder, may."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys

import pytest

from helpers import REPO
from tiers import ProcessStarted, is_integration


def test_a_fast_tier_test_cannot_start_a_process(fast_tier_guard: list[str]) -> None:
    with pytest.raises(ProcessStarted, match=r"test_tiers\.py::.* is a fast-tier test but started a process"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with pytest.raises(ProcessStarted):
        subprocess.check_output(["git", "--version"])
    with pytest.raises(ProcessStarted):
        os.system("true")
    with pytest.raises(ProcessStarted):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with contextlib.suppress(Exception):  # code under test that swallows the error: still recorded, for teardown
        subprocess.run(["true"])
    assert len(fast_tier_guard) == 5 and fast_tier_guard[0].startswith("subprocess.Popen [")
    assert fast_tier_guard[3].startswith("a multiprocessing spawn")
    fast_tier_guard.clear()  # else this test would fail at teardown, as one that started a process


@pytest.mark.integration
def test_an_integration_test_may_start_processes(fast_tier_guard: None) -> None:
    assert fast_tier_guard is None
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)


def test_the_tier_follows_the_folder() -> None:
    tests = REPO / "tests"
    assert is_integration(tests / "integration" / "test_train.py")
    assert not is_integration(tests / "unit" / "test_runtime.py")


def test_collected_tests_carry_their_folders_tier(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        if "integration" in item.path.parts:
            assert item.get_closest_marker("integration") is not None, item.nodeid
