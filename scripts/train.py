"""Train a model: `python scripts/train.py model=cnn data=cifar10 precision=amp`.

Thin on purpose: Hydra composes the config against its schemas (lab.config), lab.cli validates it and reports
config mistakes in a line or two, lab.workflows.train does the work. torch is imported only inside main(), so
`--help` and `--cfg job` answer without loading it.
"""

import sys

import hydra
from omegaconf import DictConfig

from lab import cli
from lab.distributed.env import adopt_slurm_ranks, keep_hydra_outputs_to_rank_zero


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return cli.run_workflow(cfg, "train")


if __name__ == "__main__":
    # under torchrun/srun every rank runs this script; only rank 0 may create the run dir (the others get scratch)
    adopt_slurm_ranks()
    sys.argv = keep_hydra_outputs_to_rank_zero(sys.argv)
    # a used hydra.run.dir= is refused before Hydra writes into it; config mistakes in one or two lines
    cli.main(main, "train")
