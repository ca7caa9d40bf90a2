"""Export a checkpoint (ONNX, torch.export, TorchScript), each checked against eager PyTorch.

    python scripts/export.py ckpt_path=outputs/train/<run>/checkpoints/best.pt export.formats=[onnx,pt2]

Thin on purpose: Hydra composes and validates the config, lab.workflows.export does the work. torch is imported
only inside main(), so `--help` and `--cfg job` answer without loading it.
"""

import hydra
from omegaconf import DictConfig

from lab.cli import run_workflow


@hydra.main(config_path="../conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return run_workflow(cfg, "export")


if __name__ == "__main__":
    main()
