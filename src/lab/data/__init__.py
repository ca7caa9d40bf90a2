"""Datasets, transforms and loaders: `datasets.build(cfg)` gives a `common.DataModule`, then `loaders.make_loader`
makes each split's loader.

`options.py` is imported at every start (`--help` too), and importing it runs this file first, so this file
imports nothing: import each name from the module that defines it."""
