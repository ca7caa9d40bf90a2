"""The separate commands, each run on its own: the environment doctor (``scripts/doctor.py``: ``doctor``,
``doctor_checks``, ``torch_checks``), the DataLoader benchmark (``bench_data``) and the LR range test (``lr_find``).

A training run imports nothing from here: what every run may use (the profiler, anomaly detection, the
out-of-memory report) lives with training in ``lab.training``. This file imports none of the modules, so
``scripts/doctor.py`` does not load torch before it checks it."""
