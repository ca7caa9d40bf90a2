"""Read table rows for inference: a .csv file with the training features as named columns, or a .npy/.pt array of
shape (N, F) in the training column order. Rows are standardised with the checkpoint's data_meta statistics."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lab.errors import UserError


def read_rows(spec: str, meta: Mapping[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """Return (name, standardised feature row) for every row of the file `input=` names."""
    path = Path(spec).expanduser()
    names = list(meta["feature_names"])
    if not path.is_file():
        raise UserError(
            f"input={spec} does not exist; give a .csv with columns {names} or a .npy of shape (N, {len(names)})"
        )
    if path.suffix.lower() == ".csv":
        from lab.data.tabular import INPUT_ENCODING_FIX, numeric_columns, read_csv

        header, rows = read_csv(path, fix=INPUT_ENCODING_FIX)
        missing = [n for n in names if n not in header]
        if missing:
            raise UserError(f"input={spec} lacks the feature column(s) {missing} the model was trained on")
        matrix = numeric_columns(rows, header, names, path)
    elif path.suffix.lower() in (".npy", ".pt"):
        try:
            data = (
                np.load(path, allow_pickle=False)
                if path.suffix.lower() == ".npy"
                else torch.load(path, weights_only=True)
            )
        except Exception as err:
            raise UserError(f"input={spec}: cannot read the array ({str(err).splitlines()[0]})") from err
        matrix = np.asarray(data.numpy() if isinstance(data, torch.Tensor) else data, dtype=np.float64)
        matrix = matrix[None] if matrix.ndim == 1 else matrix
        if matrix.ndim != 2 or matrix.shape[1] != len(names):
            raise UserError(
                f"input={spec} has shape {tuple(np.shape(data))}; the model takes rows of {len(names)} features "
                f"({', '.join(names)}): give shape (N, {len(names)})"
            )
    else:
        raise UserError(f"input={spec}: give a .csv with columns {names} or a .npy / .pt array (N, {len(names)})")
    if not np.isfinite(matrix).all():
        raise UserError(f"input={spec} holds NaN or inf values; a prediction for them would mean nothing")
    x = (torch.from_numpy(matrix) - torch.tensor(meta["feature_mean"])) / torch.tensor(meta["feature_std"])
    return [(f"{path}[{i}]", row) for i, row in enumerate(x.float())]
