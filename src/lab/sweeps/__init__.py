"""Hydra multirun support shared by every sweeper (the grid sweeper in ``hydra_plugins/lab_sweepers``, an
extension's): job outcomes and fail-fast (``jobs``), the sweep summary table (``summary``), who owns a sweep dir and
what ``resume=auto`` continues in it (``ownership``)."""
