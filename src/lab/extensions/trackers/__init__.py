"""The `trackers` extension: TensorBoard and MLflow beside the core's wandb and CSV. See README.md here.

`logger=tensorboard` writes event files into the run dir (``tensorboard_backend``). `logger=mlflow` records each
job as an MLflow run in a shared store, by default SQLite under `paths.outputs` (``mlflow_backend``). Both are
options of the core's `logger` group, so they combine with others (`logger=[wandb,tensorboard,mlflow]`) and go
away with this folder.
"""

EXTRAS: tuple[str, ...] = ("trackers",)  # tensorboard; mlflow-skinny, sqlalchemy, alembic
