"""The TensorBoard tracker behind the Tracker interface, read back with TensorBoard's EventAccumulator: scalars per
step, the config and summary as text; a continued run's event files read as one run, the steps after the checkpoint
it resumed from purged; a new run in the dir removing the old run's. Also: choosing this extension's trackers with the
logger group, and each refused, naming the extra, when its packages are missing."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lab.config import validate
from lab.errors import ConfigError
from lab.tracking import Tracker, backends
from tracker_runs import CONFIG, EVENTS, GIT, record
from tracker_runs import logger as logger_node


def _tensorboard(run_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def _text(events: EventAccumulator, tag: str) -> dict:
    (entry,) = events.Tensors(f"{tag}/text_summary")
    return yaml.safe_load(textwrap.dedent(entry.tensor_proto.string_val[0].decode()))


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in _tensorboard(run_dir).Scalars("train/loss")]


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_tensorboard_has_scalars_per_step_and_the_config_and_summary_as_text(tmp_path):
    summary = record(tmp_path, "tensorboard")
    events = _tensorboard(tmp_path)
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(1, 2.0), (2, 1.5), (3, 1.0)]
    assert [(e.step, e.value) for e in events.Scalars("val/acc")] == [(2, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("epoch")] == [(1, 1), (2, 1), (2, 1), (3, 2)]
    assert math.isnan(events.Scalars("train/grad_norm")[0].value)
    assert _text(events, "config") == {**CONFIG, "provenance": GIT}
    assert _text(events, "summary") == {"val/acc_best": 0.5, "status": "completed"}
    assert summary["tensorboard_dir"] == str(tmp_path / "tensorboard")


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_a_resumed_run_continues_its_event_files_as_one_run(tmp_path):
    record(tmp_path, "tensorboard", "csv", events=EVENTS[:3])
    record(tmp_path, "tensorboard", "csv", events=EVENTS[3:], continuing=True)
    assert _losses(tmp_path) == [(1, 2.0), (2, 1.5), (3, 1.0)]


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_a_new_run_in_the_same_dir_removes_the_event_files_of_the_run_it_replaces(tmp_path):
    """overwrite=true: TensorBoard would draw the old run's events and the new one's as one zigzag."""
    record(tmp_path, "tensorboard")
    record(tmp_path, "tensorboard", continuing=True)  # a second attempt of that run, to be replaced too
    assert [step for step, _ in _losses(tmp_path)] == [1, 2, 3, 1, 2, 3]
    record(tmp_path, "tensorboard", events=[({"train/loss": 9.0}, 1, 1), ({"train/loss": 8.0}, 2, 1)])
    assert _losses(tmp_path) == [(1, 9.0), (2, 8.0)]


@pytest.mark.integration  # starts git (provenance/git.diff)
def test_a_resume_purges_what_its_killed_attempt_logged_after_the_checkpoint(tmp_path):
    """Killed at step 5 with last.pt at step 3: steps 4-5 are done again, and TensorBoard shows them once."""
    record(tmp_path, "tensorboard", events=[({"train/loss": 1.0 / step}, step, 1) for step in range(1, 6)])
    tracker = Tracker(tmp_path, logger_cfg=logger_node("tensorboard"), continuing=True, resumed_step=3)
    with tracker.session():
        for step in range(4, 7):
            tracker.log({"train/loss": 10.0 + step}, step=step, epoch=1)

    expected = [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 14.0), (5, 15.0), (6, 16.0)]
    losses = _losses(tmp_path)  # the first attempt's steps 4-5 purged
    assert [step for step, _ in losses] == [step for step, _ in expected]
    assert [value for _, value in losses] == pytest.approx([value for _, value in expected])


# --------------------------------------------------------------------------- choosing them
@pytest.mark.parametrize(
    ("overrides", "chosen"),
    [
        (["logger=tensorboard"], ["tensorboard"]),
        (["logger=[wandb,tensorboard,csv]"], ["wandb", "tensorboard", "csv"]),
        (["logger=[tensorboard,csv]", "logger.wandb.mode=offline"], ["tensorboard", "csv"]),
        (["logger=none", "logger.backends.tensorboard=true"], ["tensorboard"]),
        (["logger=[csv,mlflow,wandb]"], ["csv", "mlflow", "wandb"]),
    ],
)
def test_the_logger_group_chooses_these_trackers_too(compose, overrides, chosen):
    cfg = compose(overrides)
    validate(cfg)
    assert sorted(backends.chosen(cfg.logger)) == sorted(chosen)
    order = backends.in_start_order(cfg.logger)  # those slow to start (in a child process: wandb, mlflow) first
    slow = [name for name in order if name in ("wandb", "mlflow")]
    assert sorted(order) == sorted(chosen) and order[: len(slow)] == slow


@pytest.mark.parametrize(
    ("overrides", "hidden"),
    [(["logger=tensorboard"], ("tensorboard",)), (["logger=[wandb,mlflow]"], ("mlflow-skinny",))],
)
def test_a_tracker_whose_extra_is_missing_is_refused_naming_the_extra(compose, without, overrides, hidden):
    cfg = compose(overrides)
    validate(cfg)  # installed here: accepted
    without(*hidden)
    with pytest.raises(ConfigError, match=rf"^logger=\w+ needs {hidden[0]}\b.*make install EXTRAS=\S*\btrackers\b"):
        validate(cfg)


def test_a_tracker_turned_off_needs_nothing(compose, without):
    without("tensorboard", "mlflow-skinny")
    validate(compose(["logger=csv"]))  # every tracker has its settings node; only those turned on are checked
