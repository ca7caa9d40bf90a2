"""Write deployable model files: per-format writers, parity checks, the manifest, and export steps (`steps`)."""
