"""`hydra/launcher=slurm` (LabSlurmConf in config.py): Hydra's submitit SLURM launcher, plus resumption.

On preemption or timeout submitit calls the launcher's `checkpoint()` inside the running job and requeues what
it returns. Hydra's launcher requeues the same overrides, so the job would train again from scratch; this one
adds `ckpt_path=<run dir>/checkpoints/last.pt` when that checkpoint exists, so the requeued job continues
exactly where it stopped (same run dir: the job's number and sweep dir do not change).

`_`-prefixed: Hydra's plugin scan skips it, so a machine without the `slurm` extra (submitit) starts cleanly.
"""

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher


def with_resume(overrides: list[str], run_dir: Path) -> list[str]:
    last = run_dir / "checkpoints" / "last.pt"
    if not last.is_file():
        return list(overrides)
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "ckpt_path"]
    return [*kept, f"ckpt_path={last}"]


class LabSlurmLauncher(SlurmLauncher):
    def checkpoint(self, sweep_overrides: list[str], *args: Any, **kwargs: Any) -> Any:
        # Called during the job (submitit's signal handler), so HydraConfig is this job's: its run dir.
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        return super().checkpoint(with_resume(sweep_overrides, run_dir), *args, **kwargs)
