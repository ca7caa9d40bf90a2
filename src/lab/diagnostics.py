"""Start-of-run report: what is about to train, on what, and whether the first batch looks sane."""

from __future__ import annotations

import logging

import torch
from torch import nn

from lab.errors import UserError

log = logging.getLogger(__name__)


def parameter_counts(model: nn.Module) -> dict[str, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return {"trainable": trainable, "frozen": frozen}


def warn_if_frozen(model: nn.Module) -> None:
    """Frozen parameters never train; when that is a mistake (a backbone left frozen), nothing else tells you."""
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if frozen:
        shown = ", ".join(frozen[:8]) + (" ..." if len(frozen) > 8 else "")
        log.warning(
            "!!! %d parameter tensors are FROZEN (requires_grad=False) and will not train: %s", len(frozen), shown
        )


def model_summary(model: nn.Module, example: torch.Tensor) -> str:
    """torchinfo's layer table for one example batch; restores train/eval mode afterwards."""
    import torchinfo

    was_training = model.training
    try:
        stats = torchinfo.summary(
            model,
            input_data=example,
            verbose=0,
            mode="eval",
            device=example.device,
            col_names=("output_size", "num_params", "trainable"),
        )
        return str(stats)
    except Exception as err:  # a summary must never stop training
        return f"(torchinfo could not summarise the model: {err})"
    finally:
        model.train(was_training)


def check_first_batch(inputs: torch.Tensor, targets: torch.Tensor, num_classes: int) -> str:
    """Catch broken data before it costs an epoch: NaNs, labels out of range, an unnormalized input range."""
    if not torch.isfinite(inputs).all():
        raise UserError("the first training batch contains NaN or inf inputs; check the dataset and its transforms")
    low, high = int(targets.min()), int(targets.max())
    if low < 0 or high >= num_classes:
        raise UserError(
            f"labels range over [{low}, {high}] but the model has {num_classes} classes; "
            "set data.num_classes or fix the labels"
        )
    x = inputs.float()
    return (
        f"first batch: inputs {tuple(inputs.shape)} {inputs.dtype} range [{x.min():.3f}, {x.max():.3f}] "
        f"mean {x.mean():.3f} std {x.std():.3f}; targets {tuple(targets.shape)} {targets.dtype} "
        f"range [{low}, {high}]"
    )
