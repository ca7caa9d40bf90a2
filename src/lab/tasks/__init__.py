"""Tasks: what is learned, how it is scored and what eval and infer write. The trainer and workflows call only the
`base.Task` interface; `common.build(cfg.task, meta)` returns the configured one.

`options.py` is imported at every start (`--help` too), and importing it runs this file first, so this file
imports nothing: import each name from the module that defines it."""
