"""Score a checkpoint on a split of its own dataset.

    python scripts/eval.py ckpt_path=outputs/train/<run>/checkpoints/best.pt eval.split=val

Thin on purpose: Hydra composes the config against its schemas (lab.config), lab.cli validates it and reports
config mistakes in a line or two, lab.workflows.evaluate does the work. torch is imported only inside main(), so
`--help` and `--cfg job` answer without loading it.
"""

import hydra
from omegaconf import DictConfig

from lab import cli


@hydra.main(config_path="../conf", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return cli.run_workflow(cfg, "evaluate")


if __name__ == "__main__":
    cli.main(main, "eval")  # config mistakes in one or two lines (HYDRA_FULL_ERROR=1: Hydra's full report)
