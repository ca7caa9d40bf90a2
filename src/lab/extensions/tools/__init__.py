"""The `tools` extension: separate debugging commands, each run on its own. See README.md here.

    python -m lab.extensions.tools.doctor        the environment doctor (`make doctor`): ``doctor``, with the rows of
                                                  ``doctor_checks`` and the torch and GPU checks of ``torch_checks``
    python -m lab.extensions.tools.bench_data    the DataLoader benchmark: samples/s over loader settings
    python -m lab.extensions.tools.lr_find       the LR range test: the loss over an exponentially growing LR

A training run imports nothing from here; what every run may use, like the out-of-memory report, lives in
``lab.training``. This file imports none of the modules, so the doctor does not load torch before checking it.
"""

EXTRAS: tuple[str, ...] = ()  # the core's packages are enough
