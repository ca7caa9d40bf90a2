"""Export a checkpoint (ONNX, torch.export, TorchScript), each checked against eager PyTorch.

    python scripts/export.py ckpt_path=outputs/train/<run>/checkpoints/best.pt export.formats=[onnx,pt2]

Thin on purpose: Hydra composes the config against its schemas (lab.config), lab.cli validates it and reports
config mistakes in a line or two, lab.workflows.export does the work. torch is imported only inside main(), so
`--help` and `--cfg job` answer without loading it.
"""

import hydra
from omegaconf import DictConfig

from lab import cli


@hydra.main(config_path="../conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return cli.run_workflow(cfg, "export")


if __name__ == "__main__":
    cli.main(main, "export")  # config mistakes in one or two lines (HYDRA_FULL_ERROR=1: Hydra's full report)
