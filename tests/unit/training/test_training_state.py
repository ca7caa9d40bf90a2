"""Best-metric tracking in the training progress that checkpoints carry."""

from __future__ import annotations

import math

from lab.training.state import Progress


def test_record_keeps_the_best_value_for_max_and_min_metrics():
    accuracy = Progress()
    assert [accuracy.record(v, epoch, "max") for epoch, v in enumerate([0.5, 0.7, 0.7, 0.6], 1)] == [
        True,
        True,
        False,  # a tie is not an improvement: best.pt keeps the earlier epoch
        False,
    ]
    assert (accuracy.best_metric, accuracy.best_epoch) == (0.7, 2)
    loss = Progress()
    assert [loss.record(v, epoch, "min") for epoch, v in enumerate([0.9, 1.2, 0.4], 1)] == [True, False, True]
    assert (loss.best_metric, loss.best_epoch) == (0.4, 3)


def test_a_nan_metric_never_becomes_the_best():
    progress = Progress()
    progress.record(0.5, 1, "min")
    assert not progress.record(math.nan, 2, "min") and not progress.record(math.nan, 2, "max")
    assert (progress.best_metric, progress.best_epoch) == (0.5, 1)


def test_a_nan_at_the_first_validation_is_no_best_and_the_next_value_is():
    for mode in ("max", "min"):
        progress = Progress()
        assert not progress.record(math.nan, 1, mode)
        assert (progress.best_metric, progress.best_epoch) == (None, None)
        assert progress.record(0.9, 2, mode)
        assert (progress.best_metric, progress.best_epoch) == (0.9, 2)
