"""The fold split (disjoint, covering the pool, stratified, seeded), its record, the `cv` node's refusals, and how
the core's sweep seam expands and reduces a cross-validated parameter set."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from lab.config import ConfigError
from lab.data import bundled
from lab.data.common import splitting_pool, train_val_test
from lab.data.options import DiabetesConfig, DigitsConfig
from lab.extensions.cv.folds import FoldSplit, fold_of
from lab.extensions.cv.options import CvConfig
from lab.sweeps.jobs import Outcome, combine, expand, parts
from lab.sweeps.summary import Row, part_key


def _labels(n: int = 103, classes: int = 4) -> np.ndarray:
    return np.random.RandomState(1).randint(0, classes, n)


@pytest.mark.parametrize("stratify", [False, True])
def test_folds_are_disjoint_cover_the_pool_and_are_balanced(stratify):
    labels = _labels()
    assigned = fold_of(labels, 5, seed=3, stratify=stratify)
    assert sorted(set(assigned.tolist())) == [0, 1, 2, 3, 4]  # every sample in exactly one fold
    sizes = np.bincount(assigned)
    assert sizes.sum() == len(labels) and sizes.max() - sizes.min() <= 1
    if stratify:  # each class's share: floor or ceil of its count / folds in every fold
        for c, count in enumerate(np.bincount(labels)):
            per_fold = np.bincount(assigned[labels == c], minlength=5)
            assert set(per_fold.tolist()) <= {count // 5, -(-count // 5)}, c


def test_folds_depend_on_the_seed_alone():
    labels = _labels()
    first = fold_of(labels, 3, seed=7, stratify=True)
    assert (fold_of(labels, 3, seed=7, stratify=True) == first).all()
    assert (fold_of(labels, 3, seed=8, stratify=True) != first).any()


def test_more_folds_than_samples_is_refused():
    with pytest.raises(ConfigError, match=r"cv.folds=5 is more than the 3 samples"):
        fold_of(np.zeros(3), 5, seed=0, stratify=False)


@pytest.mark.parametrize(
    ("data", "labels"),
    [
        (DigitsConfig(), torch.from_numpy(bundled.digits()[1]).long()),
        (DiabetesConfig(), torch.zeros(442, dtype=torch.long)),  # a regression's strata: one class
    ],
    ids=["digits", "diabetes"],
)
def test_the_folds_split_the_train_val_pool_never_the_test_split(tmp_path, data, labels):
    train, val, test = train_val_test(labels, data)
    pool = set(torch.cat([train, val]).tolist())
    seen_val: list[int] = []
    for fold in range(3):
        (tmp_path / str(fold)).mkdir()  # the run dir, which a run owns before it builds its data
        split = FoldSplit(3, fold, 0, None, tmp_path / str(fold))
        with splitting_pool(split) as split_so:
            fold_train, fold_val, fold_test = train_val_test(labels, data)
        assert split_so() and torch.equal(fold_test, test)  # the test split is the data's own, untouched
        record = json.loads((tmp_path / str(fold) / "fold.json").read_text())
        assert record["train"] == fold_train.tolist() and record["val"] == fold_val.tolist()
        assert not set(record["train"]) & set(record["val"])
        assert set(record["train"]) | set(record["val"]) == pool
        assert record["stratified"] == (data.name == "digits") and (record["fold"], record["folds"]) == (fold, 3)
        seen_val += record["val"]
    assert sorted(seen_val) == sorted(pool)  # each pool sample is validated on exactly once


def test_the_cv_node_refuses_bad_values():
    with pytest.raises(ConfigError, match=r"cv.folds=1: 0 \(off\) or a number of folds >= 2"):
        CvConfig(folds=1)
    with pytest.raises(ConfigError, match=r"cv.fold=3 is not a fold of cv.folds=3"):
        CvConfig(folds=3, fold=3)
    with pytest.raises(ConfigError, match=r"has no cv.fold: its sweeper did not make one job per fold"):
        CvConfig(folds=3).pool_splitter("run")
    assert CvConfig().pool_splitter("run") is None and CvConfig().sweep_parts() is None


def test_a_sweep_runs_a_parameter_set_once_per_fold():
    config = OmegaConf.create({"cv": OmegaConf.structured(CvConfig(folds=3))})
    assert expand(config, ["seed=1"]) == [["seed=1", f"cv.fold={i}"] for i in range(3)]
    assert parts(config, ["cv.folds=2"]) == ("cv.fold", 2)  # a job's own cv.folds wins
    assert expand(config, ["cv.fold=1"]) == [["cv.fold=1"]]  # one fold asked for: one job
    off = OmegaConf.create({"cv": OmegaConf.structured(CvConfig())})
    assert expand(off, ["seed=1"]) == [["seed=1"]]


def test_a_parameter_sets_result_is_its_folds_mean_and_a_failed_fold_fails_it():
    done = [Outcome("completed", v, None) for v in (0.5, 0.7, 0.9)]
    assert combine(done).value == pytest.approx(0.7)
    failed = Outcome("failed", None, "RuntimeError: boom")
    assert combine([done[0], failed, done[1]]) == failed


def test_the_summary_finds_the_folds_whether_the_sweep_or_its_jobs_set_cv_folds():
    def row(job: int, *overrides: str) -> Row:
        return Row(job, "completed", 0.5, 1, 1.0, list(overrides), f"/s/{job}", None)

    off = OmegaConf.create({"cv": OmegaConf.structured(CvConfig())})
    on = OmegaConf.create({"cv": OmegaConf.structured(CvConfig(folds=2))})
    assert part_key(on, [row(0, "seed=1", "cv.fold=0")]) == "cv.fold"
    assert part_key(off, [row(0, "cv.folds=3", "cv.fold=0")]) == "cv.fold"  # -m cv.folds=3,5
    assert part_key(off, [row(0, "seed=1"), row(1)]) is None  # a plain sweep
