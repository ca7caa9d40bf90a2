"""The `ray` extension: `hydra/launcher=ray`, a sweep's jobs as Ray tasks. See README.md here.

- `plugins.RayLauncher`: the Hydra launcher Hydra finds (thin: no ray import at start-up).
- `launcher`: the jobs as Ray tasks with their CPU/GPU share, on a local Ray instance started for the sweep or on a
  cluster it joins; a job whose worker dies fails alone.

Grid sweeps, their summary, ownership and `resume=auto` are the core's (lab.sweeps, hydra_plugins/lab_sweepers).
"""

EXTRAS: tuple[str, ...] = ("ray",)  # ray (Ray Core)
