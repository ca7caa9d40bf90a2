"""The `cv` extension: k-fold cross-validation through Hydra multirun (`-m cv.folds=5`). See README.md.

`options.py` holds the `cv` node, a top-level node of the train config (TrainNodeConfig). In a sweep it turns each
parameter set into one job per fold (its `sweep_parts`), under any sweeper that expands jobs with
lab.sweeps.jobs.expand (the grid sweeper, the Optuna one). In each job it splits the data's train+val pool into that
fold's train and val (its `pool_splitter`, `folds.py`) and records the indices in the run dir's fold.json.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ()  # numpy and Hydra, as the core
