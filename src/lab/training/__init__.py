"""Training: the `Trainer` and its step (`trainer`), what a resume restores (`state`), the metrics between two log
lines (`window`), the evaluation loop (`evaluation`) and the report of what is about to train (`start`).

`options.py` is imported at every start (`--help` too), and importing it runs this file first, so this file
imports nothing: import each name from the module that defines it."""
