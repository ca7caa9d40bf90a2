"""The `trackers` extension: TensorBoard and MLflow beside the core's wandb and CSV (its page: README.md here).

`logger=tensorboard` writes event files into the run dir (``tensorboard_backend``); `logger=mlflow` records each job
as an MLflow run in a store every run shares, by default a SQLite database under `paths.outputs`
(``mlflow_backend``). Both are options of the core's `logger` group (``options``: a ``TrackerConfig`` each), so they
combine with the others (`logger=[wandb,tensorboard,mlflow]`) and drop with this folder.
"""

EXTRAS: tuple[str, ...] = ("trackers",)  # tensorboard; mlflow-skinny, sqlalchemy, alembic
