"""Hydra multirun support shared by the sweepers in ``hydra_plugins/lab_sweepers``: job outcomes and fail-fast
(``jobs``), the sweep summary table (``summary``), Optuna pruning (``pruning``), a GPU per parallel worker
(``devices``)."""
