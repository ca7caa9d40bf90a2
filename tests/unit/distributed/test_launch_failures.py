"""What a failed distributed job says: the rank whose error is its own, not the rank whose collective broke."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch.distributed.launcher.api
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from lab.config import ConfigError
from lab.distributed import spawning
from lab.errors import UserError

CALLSTACK = 'Traceback (most recent call last):\n  File "/x/src/lab/data/folder.py", line 55, in load\n    raise\n'


def _failure(timestamp: int, message: str, callstack: str = "") -> SimpleNamespace:
    recorded = {"message": message, "extraInfo": {"py_callstack": callstack, "timestamp": str(timestamp)}}
    return SimpleNamespace(timestamp=timestamp, message=recorded, exitcode=1)


def test_the_root_cause_is_named_not_the_rank_whose_collective_broke() -> None:
    err = SimpleNamespace(
        failures={
            0: _failure(100, "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]"),
            1: _failure(100, "PIL.UnidentifiedImageError: cannot identify image file 'bad.png'", CALLSTACK),
        }
    )
    assert spawning._describe_failure(err, 2) == (
        "rank 1 failed: PIL.UnidentifiedImageError: cannot identify image file 'bad.png' "
        "(/x/src/lab/data/folder.py:55)",
        True,  # dist.max_restarts may restart a crash
    )


def test_the_earliest_own_error_wins_and_user_errors_read_as_themselves() -> None:
    err = SimpleNamespace(
        failures={
            0: _failure(105, "ValueError: later"),
            1: _failure(101, f"{UserError.__module__}.UserError: loss became nan at optimizer step 7 (epoch 1)"),
        }
    )
    # a user's error is not restarted: it would fail again
    assert spawning._describe_failure(err, 2) == ("rank 1 failed: loss became nan at optimizer step 7 (epoch 1)", False)
    only_symptoms = SimpleNamespace(failures={2: SimpleNamespace(timestamp=1, message="", exitcode=-9)})
    assert spawning._describe_failure(only_symptoms, 3) == ("rank 2 failed: exit code -9", True)


def test_a_rank_its_peers_timed_out_waiting_for_is_named() -> None:
    timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv operation"
    err = SimpleNamespace(failures={0: _failure(100, timeout)})
    assert spawning._describe_failure(err, 2)[0].startswith(
        "rank 1 stopped responding (hung, stopped or far too slow): rank 0 gave up waiting for it after dist.timeout_s"
    )


@pytest.mark.parametrize(("gpus", "nproc", "message"), [(0, 64, "exceeds this machine's"), (2, 4, "2 GPU\\(s\\)")])
def test_more_ranks_than_the_machine_has_is_refused(monkeypatch, gpus: int, nproc: int, message: str) -> None:
    monkeypatch.setattr(spawning.torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(spawning.os, "cpu_count", lambda: 2)
    with pytest.raises(ConfigError, match=message):
        spawning.resolve_nproc(SimpleNamespace(nproc=nproc))
    assert spawning.resolve_nproc(SimpleNamespace(nproc="auto")) == (gpus or 2)


class _ChildFailed(ChildFailedError):
    """What the elastic launcher raises, with failures as @record writes them (its own formatting needs files)."""

    def __init__(self, failures: dict) -> None:
        self.name, self.failures = "worker", failures
        Exception.__init__(self, "worker failed")


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        ("RuntimeError: CUDA error: an illegal memory access", ["0", "1", "2"]),
        (f"{UserError.__module__}.UserError: bad data", ["0"]),
    ],
)
def test_a_crash_is_restarted_up_to_max_restarts_and_a_users_error_is_not(monkeypatch, error, attempts) -> None:
    seen = []

    def fake_launch(config, worker):
        def run(*args):
            worker(*args)  # what each rank runs: it reads its attempt with spawning.restart_count()
            raise _ChildFailed({1: _failure(100, error, CALLSTACK)})

        return run

    monkeypatch.setattr(torch.distributed.launcher.api, "elastic_launch", fake_launch)
    monkeypatch.setattr(spawning, "_start_forkserver", lambda: None)  # a real process: not in the fast tier
    dist_cfg = SimpleNamespace(nproc=2, master_port=None, grace_s=1, strategy="ddp", max_restarts=2)
    with pytest.raises(UserError, match=error.split(": ", 1)[1]):
        spawning.spawn(lambda: seen.append(str(spawning.restart_count())), (), dist_cfg)
    assert seen == attempts
