"""The `sweeps` extension: Optuna searches and the parallel and cluster launchers (its page: README.md here).

- `hparams_search=optuna` (conf/hparams_search/optuna.yaml): the Optuna sweeper (plugins.OptunaSweeper; the search
  in `study`, Hydra's sweep syntax as Optuna distributions in `search_space`, the storage URLs in `study_storage`),
  resumable studies shared by many drivers, and pruning inside each trial's job (`pruning`, the `optuna_pruning`
  callback option of `options`);
- `hydra/launcher=joblib`: jobs in parallel worker processes, a worker that dies failing only its own job
  (`joblib_launcher`), each worker on a GPU of its own (`devices`);
- `hydra/launcher=slurm`: Hydra's submitit launcher, a requeued job resuming from its last.pt (plugins.py).

Plain `-m` grid sweeps, their summary and their sweep dirs are the core's (lab.sweeps, hydra_plugins/lab_sweepers).
"""

EXTRAS: tuple[str, ...] = ("sweeps", "slurm")  # optuna, joblib and cloudpickle; hydra-submitit-launcher
