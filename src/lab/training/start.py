"""Log the start of a run: what is about to train, on what, and whether the first batch looks sane."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.data import batches
from lab.distributed.parallel import Parallel
from lab.errors import UserError
from lab.runtime import Precision
from lab.tracking import Tracker
from lab.training.flops import Utilization, count_flops

log = logging.getLogger(__name__)


def model_summary(model: nn.Module, example: Any, device: torch.device) -> str:
    """Return torchinfo's layer table for one example batch, restoring train/eval mode afterwards."""
    import torchinfo

    was_training = model.training
    try:
        stats = torchinfo.summary(
            model,
            input_data=example,
            verbose=0,
            mode="eval",
            device=device,
            col_names=("output_size", "num_params", "trainable"),
        )
        return str(stats)
    except Exception as err:  # a summary must never stop training
        return f"(torchinfo could not summarise the model: {err})"
    finally:
        model.train(was_training)


def check_first_batch(inputs: Any, targets: Any, task: Any) -> str:
    """Catch broken data before it costs an epoch, and return the report line. Non-finite inputs raise a
    `UserError`, then the task runs its own checks (label range, finite targets, tokens in the vocabulary)."""
    described = []
    for name, tensor in _tensors(inputs, "inputs"):
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise UserError(
                f"the first training batch contains NaN or inf {name}; check the dataset and its transforms"
            )
        x = tensor.float()
        described.append(
            f"{name} {tuple(tensor.shape)} {tensor.dtype} range [{x.min():.3f}, {x.max():.3f}] "
            f"mean {x.mean():.3f} std {x.std() if x.numel() > 1 else 0.0:.3f}"
        )
    checked = task.check_first_batch(inputs, targets)
    shapes = ", ".join(f"{tuple(t.shape)} {t.dtype}" for _, t in _tensors(targets, "targets"))
    return f"first batch: {'; '.join(described)}; targets {shapes}" + (f": {checked}" if checked else "")


def _tensors(data: Any, name: str) -> list[tuple[str, torch.Tensor]]:
    if isinstance(data, torch.Tensor):
        return [(name, data)]
    items = data.items() if isinstance(data, Mapping) else enumerate(data)
    return [pair for key, value in items for pair in _tensors(value, f"{name}[{key}]")]


def log_start(
    model: torch.nn.Module,
    task: Any,
    loader: torch.utils.data.DataLoader,
    run_dir: Path,
    device: torch.device,
    precision: Precision,
    tracker: Tracker,
    parallel: Parallel,
    peak_flops: float | None = None,
) -> Utilization | None:
    """Log what is about to train, and on what. Every rank checks the first batch; rank 0 logs and saves the rest.

    Runs on the plain model before any DDP/FSDP wrapping, because a sharded forward would be a collective. A model
    on the meta device (dist=fsdp's meta init, no weights yet) is summarised on meta copies of the batch, and its
    FLOPs are counted on a weightless stand-in on `device`. With `peak_flops` (FLOP/s of one device), rank 0 also
    counts the first batch's FLOPs and returns them for the Trainer's train/mfu."""
    inputs, targets = batches.split(next(iter(loader)))
    first_batch = check_first_batch(inputs, targets, task)
    if not parallel.is_main:
        return None
    on_meta = any(p.is_meta for p in model.parameters())
    where = torch.device("meta") if on_meta else device  # where the model's tensors are
    example = batches.to_device(batches.head(inputs, 2), where)
    summary = model_summary(model, example, where)
    (run_dir / "model_summary.txt").write_text(summary + "\n")
    tracker.save_file(run_dir / "model_summary.txt")
    log.info(
        "device %s, precision %s, %d process(es) (%s)",
        device,
        precision.describe(),
        parallel.world_size,
        parallel.name,
    )
    log.info("%s", first_batch)
    log.info("model:\n%s", summary)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen_count = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    log.info("parameters: %s trainable, %s frozen", f"{trainable:,}", f"{frozen_count:,}")
    # if freezing was a mistake (a backbone left frozen), nothing else tells you
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if frozen:
        shown = ", ".join(frozen[:8]) + (" ..." if len(frozen) > 8 else "")
        log.warning(
            "!!! %d parameter tensors are FROZEN (requires_grad=False) and will not train: %s (fine when model.freeze "
            "names them)",
            len(frozen),
            shown,
        )
    if peak_flops is None:
        return None
    on_device_inputs, on_device_targets = batches.to_device((inputs, targets), device)
    if not on_meta:
        batch_flops = count_flops(model, task, on_device_inputs, on_device_targets, device, precision)
    else:
        from lab.distributed import meta_init  # only a model built on the meta device (dist.meta_init) needs it

        try:
            with meta_init.on_fake_device(model, device) as stand_in:
                batch_flops = count_flops(stand_in, task, on_device_inputs, on_device_targets, device, precision)
        except Exception as err:  # a loss that reads values (a label check) fails, as fake tensors have none
            log.info("no FLOP count (so no train/mfu): the step cannot run without the model's weights (%s)", err)
            return None
    utilization = Utilization(batch_flops, batches.size(targets), peak_flops)
    log.info(
        "FLOPs per sample %.4g (forward + backward); peak %.4g FLOP/s per device: train/mfu logged",
        utilization.flops_per_sample,
        peak_flops,
    )
    return utilization
