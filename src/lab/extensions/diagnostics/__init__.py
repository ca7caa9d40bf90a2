"""The `diagnostics` extension: three training callbacks for finding what is wrong with a run. See README.md here.

Each is a `callback` option (options.py) that a run turns on by name:
  - `profiling` (`callback=profile`; `debug=profile` adds a short run): torch.profiler over a few steps, its
    tables, a Chrome trace and the bottleneck in one line.
  - `anomaly` (`callback=anomaly`; `debug=anomaly`): names the first NaN/inf in one line, whether module, batch,
    loss or backward op.
  - `stats` (`callback=stats`): per-layer gradient, weight and activation statistics every N steps, naming the
    layers that never learn.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ()  # the core's packages are enough
