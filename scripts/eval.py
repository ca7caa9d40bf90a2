"""Score a checkpoint on a split of its own dataset.

    python scripts/eval.py ckpt_path=outputs/train/<run>/checkpoints/best.pt eval.split=val

Thin on purpose: Hydra composes and validates the config, lab.workflows.evaluate does the work. torch is imported
only inside main(), so `--help` and `--cfg job` answer without loading it.
"""

import hydra
from omegaconf import DictConfig

from lab.cli import run_workflow


@hydra.main(config_path="../conf", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return run_workflow(cfg, "evaluate")


if __name__ == "__main__":
    main()
