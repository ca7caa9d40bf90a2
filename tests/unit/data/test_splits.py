"""lab.data.splits gives exactly the index sets of scikit-learn's train_test_split, without importing it at run
time: every split a run has used stays the same."""

import numpy as np
import pytest
from sklearn.model_selection import train_test_split

from lab.data.splits import held_out
from lab.errors import UserError

CASES = [
    # (samples, classes, fraction, seed)
    (1797, 10, 0.15, 0),
    (1528, 10, 0.15 / 0.85, 0),
    (442, 4, 0.15, 7),
    (100, 3, 0.3, 123),
    (37, 5, 0.2, 1),  # small classes: remainders tie, broken by the random state
    (60000, 10, 0.1, 42),
    (12, 2, 0.5, 3),
]


@pytest.mark.parametrize("stratify", [True, False])
@pytest.mark.parametrize(("n", "classes", "fraction", "seed"), CASES)
def test_same_split_as_scikit_learn(n, classes, fraction, seed, stratify):
    labels = np.random.RandomState(n + seed).randint(0, classes, size=n)
    labels[:classes] = np.arange(classes)  # every class present
    labels[classes : 2 * classes] = np.arange(classes)  # at least twice, as stratifying needs
    kept, held = held_out(labels, fraction, seed, stratify)
    expected_kept, expected_held = train_test_split(
        np.arange(n), test_size=fraction, random_state=seed, shuffle=True, stratify=labels if stratify else None
    )
    assert sorted(kept.tolist()) == sorted(expected_kept.tolist())
    assert sorted(held.tolist()) == sorted(expected_held.tolist())


def test_a_split_that_would_leave_nothing_is_refused():
    with pytest.raises(UserError, match="empty split"):
        held_out(np.zeros(1, dtype=int), 0.5, 0, stratify=False)
