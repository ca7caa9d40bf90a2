"""Model zoo: `common.build(cfg.model, meta)` returns the `nn.Module` for the data `meta` describes. Each model is an
option of the `model` group (`options.py`); its `build(meta)` makes the network from a module of this package.

`options.py` is imported at every start (`--help` too), and importing it runs this file first, so this file
imports nothing: import each name from the module that defines it."""
