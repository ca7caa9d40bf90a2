"""The `tools` extension: the separate debugging commands, each run on its own (its page: README.md here).

    python -m lab.extensions.tools.doctor        the environment doctor (`make doctor`): ``doctor``, with the rows of
                                                  ``doctor_checks`` and the torch and GPU checks of ``torch_checks``
    python -m lab.extensions.tools.bench_data    the DataLoader benchmark: samples/s over loader settings
    python -m lab.extensions.tools.lr_find       the LR range test: the loss over an exponentially growing LR

A training run imports nothing from here: what every run may use (the out-of-memory report) lives with training in
``lab.training``. This file imports none of the modules, so the doctor does not load torch before it checks it.
"""

EXTRAS: tuple[str, ...] = ()  # the core's packages are enough
