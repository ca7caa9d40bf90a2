"""Hydra plugins of this template: a grid sweeper that survives failing jobs, an Optuna (>= 4) sweeper with
resumable studies and pruning, a SLURM launcher that resumes requeued jobs from their last checkpoint, and a
joblib launcher whose killed worker fails only its own job.

Hydra imports every public module of this package at start-up (plugin discovery), also for `--help` and
`--cfg job`: these modules import neither optuna nor submitit nor torch; the heavy work lives in `_`-prefixed
modules that Hydra skips and the plugins import when they run.
"""
