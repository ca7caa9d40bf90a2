"""Distributed training: how processes start (`launch`), where they are (`env`), how they cooperate (`parallel`).

`env` imports no torch, because entry scripts use it before Hydra starts.
"""
