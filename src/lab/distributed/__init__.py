"""Distributed training: how processes are launched (launch), where they are (env), how they cooperate (parallel).

`env` imports no torch: entry scripts use it before Hydra starts.
"""
