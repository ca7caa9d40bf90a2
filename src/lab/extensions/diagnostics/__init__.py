"""The `diagnostics` extension: three training callbacks for finding what is wrong with a run (its page: README.md
here), each an option of the `callback` kind (options.py) that a run turns on by name.

`profiling`: torch.profiler over a few steps, its tables, a Chrome trace and the bottleneck in one line
(`callback=profile`; `debug=profile` adds a short run). `anomaly`: the first NaN/inf named in one line, module,
batch, loss or backward op (`callback=anomaly`; `debug=anomaly`). `stats`: per-layer gradient, weight and activation
statistics every N steps, and the layers that never learn named (`callback=stats`).
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ()  # the core's packages are enough
