"""The small data sets scikit-learn ships (digits, diabetes), read straight from its package files.

``sklearn.datasets`` costs about a second to import (scipy and pandas come with it) for what is one gzipped CSV
each: reading the file with numpy gives the same arrays (tests/unit/data/test_bundled.py compares them with
load_digits / load_diabetes) without that start-up cost.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from lab.errors import UserError


def _data_file(name: str) -> Path:
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    path = Path(spec.origin).parent / "datasets" / "data" / name if spec and spec.origin else None
    if path is None or not path.is_file():
        raise UserError(f"scikit-learn's bundled {name} was not found: pip install scikit-learn (requirements.txt)")
    return path


def _table(name: str, delimiter: str | None = None) -> np.ndarray:
    with gzip.open(_data_file(name), mode="rt", encoding="utf-8") as file:
        return np.loadtxt(file, delimiter=delimiter)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) float64 in 0..16, labels (1797,) int64), as sklearn.datasets.load_digits gives them."""
    table = _table("digits.csv.gz", delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


DIABETES_FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def diabetes() -> tuple[np.ndarray, np.ndarray]:
    """(features (442, 10), progression (442,)), as sklearn.datasets.load_diabetes(scaled=False) gives them."""
    return _table("diabetes_data_raw.csv.gz"), _table("diabetes_target.csv.gz")
