"""Optimizers with their parameter groups and LR scaling (`optimizers`), and LR schedules (`schedulers`).

`options.py` is imported at every start (`--help` too), and importing it runs this file first, so this file
imports nothing: import each name from the module that defines it."""
