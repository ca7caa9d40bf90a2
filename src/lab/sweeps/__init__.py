"""Support Hydra multiruns for every sweeper: our grid sweeper (`hydra_plugins/lab_sweepers`) or an extension's.

`jobs` covers job outcomes and fail-fast, `summary` the sweep table, and `ownership` who owns a sweep dir and what
`resume=auto` continues in it."""
