"""Hydra plugins of this template: a grid sweeper that survives failing jobs (the default sweeper), and the
extensions' sweepers and launchers, re-exported where Hydra looks for them (extensions.py).

Hydra imports every public module of this package at start-up (plugin discovery), also for `--help` and
`--cfg job`: these modules import no torch, and the extensions' plugins import their heavy packages when they run.
"""
