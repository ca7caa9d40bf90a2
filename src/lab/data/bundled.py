"""Read the small data sets scikit-learn ships (digits, diabetes) straight from its package files.

Importing `sklearn.datasets` takes about a second (it pulls in scipy and pandas), yet each data set is one gzipped
CSV. Reading it with numpy gives the same arrays without that cost. tests/unit/data/test_bundled.py checks this.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from lab.errors import UserError


def _table(name: str, delimiter: str | None = None) -> np.ndarray:
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    path = Path(spec.origin).parent / "datasets" / "data" / name if spec and spec.origin else None
    if path is None or not path.is_file():
        raise UserError(f"scikit-learn's bundled {name} was not found: pip install scikit-learn (requirements.txt)")
    with gzip.open(path, mode="rt", encoding="utf-8") as file:
        return np.loadtxt(file, delimiter=delimiter)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """Return (images, labels) as `load_digits` does: (1797, 8, 8) float64 in 0..16 and (1797,) int64."""
    table = _table("digits.csv.gz", delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


DIABETES_FEATURES = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


def diabetes() -> tuple[np.ndarray, np.ndarray]:
    """Return (features (442, 10), progression (442,)) as `load_diabetes(scaled=False)` does."""
    return _table("diabetes_data_raw.csv.gz"), _table("diabetes_target.csv.gz")
