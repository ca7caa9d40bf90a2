"""Tables: scikit-learn's bundled diabetes data and a user's own CSV file; items `(float32 features (F,), target)`.

Features, and a numeric target, are standardised with the train split's statistics, kept in meta so metrics and
predictions are reported in the target's own units. A class target becomes label indices, its names in meta.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lab.data import bundled
from lab.data.common import DataModule, InMemoryDataset, train_val_test
from lab.data.text import ENCODING_FIX, read_text
from lab.errors import ConfigError


class TableDataset(InMemoryDataset):
    """Rows of one feature matrix with their targets. A whole batch is fetched with one index operation."""

    def __init__(self, features: torch.Tensor, targets: torch.Tensor) -> None:
        self.features, self.targets = features, targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.targets[index]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        x, y = self.fetch(torch.as_tensor(indices, dtype=torch.long))
        return list(zip(x.unbind(0), y.unbind(0)))

    def fetch(self, index: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.targets[index]  # no augmentation: `generator` is unused

    def to(self, device: torch.device) -> TableDataset:
        return TableDataset(self.features.to(device), self.targets.to(device))


def table_module(
    features: np.ndarray,
    targets: np.ndarray,
    *,
    feature_names: Sequence[str],
    target_name: str,
    class_names: Sequence[str] | None,
    cfg: Any,
) -> DataModule:
    """Split a table by data.split_seed, standardise it with the train split's statistics, and describe it in meta."""
    x = torch.from_numpy(np.asarray(features, dtype=np.float64))
    classes = class_names is not None
    y = torch.from_numpy(np.asarray(targets)).long() if classes else torch.from_numpy(np.asarray(targets, np.float64))
    strata = y if classes else torch.zeros(len(y), dtype=torch.long)  # stratify by class when there are classes
    train_idx, val_idx, test_idx = train_val_test(strata, cfg)

    mean, std = x[train_idx].mean(0), x[train_idx].std(0, unbiased=False).clamp_min(1e-12)
    x = ((x - mean) / std).float()
    meta: dict[str, Any] = {
        "input_shape": [x.shape[1]],
        "feature_names": [str(n) for n in feature_names],
        "feature_mean": mean.tolist(),
        "feature_std": std.tolist(),
        "target_name": str(target_name),
    }
    if class_names is not None:
        meta.update(num_outputs=len(class_names), num_classes=len(class_names), class_names=list(class_names))
    else:
        t_mean, t_std = float(y[train_idx].mean()), float(y[train_idx].std(unbiased=False)) or 1.0
        y = ((y - t_mean) / t_std).float()
        meta.update(num_outputs=1, target_mean=t_mean, target_std=t_std)

    train, val = TableDataset(x[train_idx], y[train_idx]), TableDataset(x[val_idx], y[val_idx])
    test = None if test_idx is None else TableDataset(x[test_idx], y[test_idx])
    return DataModule(train=train, val=val, test=test, meta=meta)


def build_diabetes(cfg: Any) -> DataModule:
    """Build the diabetes table: 442 patients, 10 baseline features (age, sex, BMI, blood pressure, six serum
    measurements). The target measures disease progression one year later (25..346)."""
    features, progression = bundled.diabetes()
    return table_module(
        features,
        progression,
        feature_names=bundled.DIABETES_FEATURES,
        target_name="progression",
        class_names=None,
        cfg=cfg,
    )


def build_csv(cfg: Any) -> DataModule:
    header, rows = read_csv(Path(cfg.path), cfg.encoding)
    if cfg.target not in header:
        raise ConfigError(f"data.target={cfg.target!r} is not a column of {cfg.path}; its columns: {', '.join(header)}")
    features = list(cfg.features) if cfg.features else [c for c in header if c != cfg.target]
    unknown = [c for c in features if c not in header]
    if unknown or not features:
        raise ConfigError(f"data.features {unknown or '[]'} are not columns of {cfg.path}; its columns: {header}")
    matrix = numeric_columns(rows, header, features, cfg.path)
    raw = [row[header.index(cfg.target)] for row in rows]
    if cfg.target_type == "class":
        _check_labels(raw, cfg)
        class_names = sorted(set(raw), key=_natural)
        targets = np.array([class_names.index(v) for v in raw])
        if len(class_names) < 2:
            raise ConfigError(f"data.target={cfg.target!r} has one value only in {cfg.path}: nothing to classify")
    else:
        class_names = None
        targets = numeric_columns(rows, header, [cfg.target], cfg.path)[:, 0]
    return table_module(
        matrix, targets, feature_names=features, target_name=cfg.target, class_names=class_names, cfg=cfg
    )


INPUT_ENCODING_FIX = "save the file as UTF-8"  # infer's input= tables are read as UTF-8


def read_csv(path: Path, encoding: str = "utf-8", fix: str = ENCODING_FIX) -> tuple[list[str], list[list[str]]]:
    """Read (header, rows) of a CSV file with a header row. Raises ConfigError saying what is wrong with it.
    Bytes not valid in `encoding` are read as U+FFFD and counted in a warning that suggests `fix` (`text.read_text`)."""
    if not path.is_file():
        raise ConfigError(f"data.path={path} does not exist; give a .csv file with a header row")
    text = read_text(path, encoding, fix, newline="")  # csv handles line ends, so quoted fields keep theirs
    table = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    if len(table) < 2:
        raise ConfigError(f"data.path={path} has no data rows under its header")
    header, rows = [h.strip() for h in table[0]], table[1:]
    # csv allows a repeated name, and header.index() would then read the first column twice
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise ConfigError(
            f"{path}: the header names column(s) {', '.join(map(repr, duplicated))} more than once; "
            "give every column its own name"
        )
    short = next((i for i, row in enumerate(rows, 2) if len(row) != len(header)), None)
    if short is not None:
        raise ConfigError(f"{path} line {short} has {len(rows[short - 2])} fields, the header {len(header)}")
    return header, rows


def numeric_columns(rows: list[list[str]], header: list[str], columns: list[str], path: Any) -> np.ndarray:
    """Return the columns as a float matrix. Raises ConfigError naming the first cell that is not a number."""
    index = [header.index(c) for c in columns]
    out = np.empty((len(rows), len(index)))
    for r, row in enumerate(rows):
        for c, i in enumerate(index):
            try:
                out[r, c] = float(row[i])
            except ValueError:
                raise ConfigError(
                    f"{path} line {r + 2}, column {columns[c]!r}: {row[i]!r} is not a number (feature columns and a "
                    "regression target must be numeric; list the numeric ones in data.features)"
                ) from None
    bad = ~np.isfinite(out)  # float() reads "nan" and "inf" as numbers
    if bad.any():
        named = [repr(columns[c]) for c in np.flatnonzero(bad.any(0))]  # only the columns that hold them
        rows_bad = np.flatnonzero(bad.any(1))
        first = rows_bad[0]
        cell = rows[first][index[np.flatnonzero(bad[first])[0]]]
        which = f"column {named[0]} holds" if len(named) == 1 else f"columns {', '.join(named)} hold"
        count = f"{len(rows_bad)} row{'s' if len(rows_bad) > 1 else ''}"
        raise ConfigError(
            f"{path}: {which} NaN or inf ({count}, the first line {first + 2}: {cell!r}); fill or drop those rows"
        )
    return out


def _check_labels(raw: list[str], cfg: Any) -> None:
    """Raise ConfigError if class labels hold fractional numbers; labels are names or integers ("3", "3.0").
    A fractional value is a measured quantity: each distinct value would become a class, and accuracy stay near 0."""
    try:
        values = [float(v) for v in raw]
    except ValueError:
        return  # names, or names mixed with numbers, are labels
    fractional = next((v for v, x in zip(raw, values) if not x.is_integer()), None)
    if fractional is not None:
        raise ConfigError(
            f"data.target={cfg.target!r} in {cfg.path} holds non-integer numbers ({fractional!r}, "
            f"{len(set(raw))} distinct values in {len(raw)} rows), not class labels; use task=regression "
            "to predict a numeric target"
        )


def _natural(value: str) -> tuple:
    """Sort class names in numeric order when they are numbers ("2" before "10"), else alphabetically."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)
