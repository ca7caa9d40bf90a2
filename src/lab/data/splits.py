"""Held-out splits computed with numpy alone: the index sets of scikit-learn's `train_test_split(..., shuffle=True,
random_state=seed)`, stratified or not, without importing `sklearn.model_selection` (about a second, scipy with it)
in every run. A stratified split draws each class's share of the held-out set (the approximate mode of the
multivariate hypergeometric, ties broken by the random state), then permutes within each class. Matching
scikit-learn's draws keeps every split a run used the same; tests/unit/data/test_splits.py compares the two.
"""

from __future__ import annotations

import math

import numpy as np

from lab.errors import UserError


def held_out(labels: np.ndarray, fraction: float, seed: int, stratify: bool) -> tuple[np.ndarray, np.ndarray]:
    """Split `range(len(labels))` into unsorted (kept, held) index arrays, holding out ceil(fraction * n)."""
    n = len(labels)
    n_held = math.ceil(fraction * n)
    n_kept = n - n_held
    if n_held == 0 or n_kept == 0:
        raise UserError(
            f"cannot hold out a fraction {fraction} of {n} samples (it leaves an empty split); "
            "use more data or another data.val_fraction / data.test_fraction"
        )
    rng = np.random.RandomState(seed)
    if not stratify:
        permutation = rng.permutation(n)
        return permutation[n_held:], permutation[:n_held]
    if n and labels[0] == labels[-1] and (labels == labels[0]).all():
        # One class (a regression's strata). Same result as the general path below, but without sorting the labels
        # or building per-class index arrays: a memory-mapped table may have hundreds of millions of rows.
        shuffled = rng.permutation(n)
        return shuffled[:n_kept].astype(np.int64), shuffled[n_kept:].astype(np.int64)
    _, class_of, class_counts = np.unique(labels, return_inverse=True, return_counts=True)
    class_members = np.split(np.argsort(class_of, kind="stable"), np.cumsum(class_counts)[:-1])
    kept_per_class = _approximate_mode(class_counts, n_kept, rng)
    held_per_class = _approximate_mode(class_counts - kept_per_class, n_held, rng)
    kept, held = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for members, n_k, n_h in zip(class_members, kept_per_class, held_per_class):
        shuffled = members.take(rng.permutation(len(members)), mode="clip")
        # Keep array pieces, not Python ints: an int object costs ~40 bytes per sample, and a table may have
        # hundreds of millions of rows
        kept.append(shuffled[:n_k])
        held.append(shuffled[n_k : n_k + n_h])
    return np.concatenate(kept).astype(np.int64), np.concatenate(held).astype(np.int64)


def _approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Return the samples per class in the most likely draw of `n_draws`: the floors of the proportional shares,
    plus one for the classes with the largest remainders (ties broken at random) until the total is `n_draws`."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        # Python's set, not np.unique: numpy 2.4's np.unique imports numpy.ma (70 ms of every run's start-up)
        for value in sorted(set(remainder.tolist()), reverse=True):
            (candidates,) = np.where(remainder == value)
            add_now = min(len(candidates), need_to_add)
            floored[rng.choice(candidates, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)
