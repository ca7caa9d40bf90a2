"""The `sweeps` extension: Optuna searches, and parallel and cluster launchers. See README.md here.

- `hparams_search=optuna`: the Optuna sweeper (plugins.OptunaSweeper, `study`, `search_space`, `study_storage`),
  with resumable studies shared by many drivers and pruning inside each trial (`pruning`, `options`).
- `hydra/launcher=joblib`: jobs in parallel workers, where a dead worker fails only its own job
  (`joblib_launcher`); each worker gets its own GPU (`devices`).
- `hydra/launcher=slurm`: Hydra's submitit launcher, where a requeued job resumes from its last.pt (plugins.py).

Plain `-m` grid sweeps belong to the core (lab.sweeps, hydra_plugins/lab_sweepers).
"""

EXTRAS: tuple[str, ...] = ("sweeps", "slurm")  # optuna, joblib and cloudpickle; hydra-submitit-launcher
