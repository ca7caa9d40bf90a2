"""Hydra plugins: the default grid sweeper, which survives failing jobs, and the extensions' plugins (extensions.py).

Hydra imports every public module here at start-up, even for `--help` and `--cfg job`. So these modules import no
torch, and the extensions' plugins import their heavy packages only when they run.
"""
