"""Debugging tools, each run on its own command: the environment doctor (``doctor``), the DataLoader benchmark
(``bench_data``), the LR range test (``lr_find``) and the step profiler of ``debug=profile`` (``profiling``).

Nothing in the training path imports this package at module level: the training workflow imports
``lab.tools.profiling`` only when ``trainer.profile.enabled`` is set, ``lab.tools.anomaly`` only with
``trainer.detect_anomaly``, and ``lab.tools.oom`` (the out-of-memory report) only when a workflow starts. Import
the modules themselves (this file imports none of them, so ``scripts/doctor.py`` does not load torch before it
checks it)."""
