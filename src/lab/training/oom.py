"""Explain a CUDA out-of-memory error: where memory went and what to change, instead of a wall of traceback.

`lab.cli.run_workflow` wraps every workflow (and spawned DDP ranks) in `explained(cfg)`: the log gets the report,
with overrides to try worked out from the run's config, and the run ends with a one-line `UserError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import torch
from omegaconf import OmegaConf

from lab.errors import UserError

log = logging.getLogger(__name__)

GIB = 2**30
# the usage rows of torch.cuda.memory_summary() worth reading (its full table has ~30 rows)
SUMMARY_ROWS = ("CUDA OOMs", "Metric", "Allocated memory", "Active memory", "GPU reserved memory", "Non-releasable")


@contextlib.contextmanager
def explained(cfg: Any) -> Iterator[None]:
    """On an OOM, log the memory report and the next steps, then end the run with a one-line `UserError`."""
    try:
        yield
    except torch.OutOfMemoryError as err:
        where, evaluating = _where(err.__traceback__)
        steps = next_steps(cfg, evaluating)
        cause = str(err).strip().splitlines()[0] if str(err).strip() else "CUDA out of memory"
        report = [f"CUDA out of memory{where}: {cause}", *memory_report(), "next steps, most effective first:"]
        report += [f"  {step}" for step in steps]
        log.error("%s", "\n".join(report))
        first = f": try {steps[0]}" if steps else ""
        raise UserError(
            f"CUDA out of memory{where}{first} (the memory report and more steps are in the log above)"
        ) from err


def _where(tb: TracebackType | None) -> tuple[str, bool]:
    """Return (" in training step N (epoch E)", False) or (" while evaluating", True), from the frames the error
    passed through. The innermost match wins."""
    where, evaluating = "", False
    while tb is not None:
        frame = tb.tb_frame
        module, function = frame.f_globals.get("__name__", ""), frame.f_code.co_name
        if module == "lab.training.trainer" and function == "train_step":
            progress = frame.f_locals["self"].progress
            where = f" in training step {progress.global_step + 1} (epoch {progress.epoch + 1})"
        elif module == "lab.training.evaluation" and function == "accumulate_metrics":  # validation, test, eval.py
            where, evaluating = " while evaluating", True
        tb = tb.tb_next
    return where, evaluating


def memory_report() -> list[str]:
    """Return report lines: current and peak memory, the allocator's usage rows and the largest live allocations."""
    if not torch.cuda.is_available():
        return ["(no CUDA device is visible to report on)"]
    device = torch.cuda.current_device()
    free, total = torch.cuda.mem_get_info(device)
    allocated, peak = torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)
    reserved, peak_reserved = torch.cuda.memory_reserved(device), torch.cuda.max_memory_reserved(device)
    lines = [
        f"memory on cuda:{device}: {allocated / GIB:.2f} GiB allocated now, peak {peak / GIB:.2f} GiB; "
        f"{reserved / GIB:.2f} GiB reserved by PyTorch (peak {peak_reserved / GIB:.2f}); "
        f"{free / GIB:.2f} GiB free of {total / GIB:.2f} GiB",
    ]
    summary = torch.cuda.memory_summary(device, abbreviated=True).splitlines()
    lines += [line for line in summary if any(row in line for row in SUMMARY_ROWS)]
    live = [
        block["size"]
        for segment in torch.cuda.memory_snapshot()
        if segment.get("device", device) == device
        for block in segment["blocks"]
        if block["state"] == "active_allocated"
    ]
    if live:
        largest = sorted(live, reverse=True)[:8]
        sizes = ", ".join(f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2**20:.1f} MiB" for n in largest)
        lines.append(f"largest live allocations: {sizes}")
    return lines


def next_steps(cfg: Any, evaluating: bool) -> list[str]:
    """Return the overrides worth trying for this run's config, most effective first."""

    def get(key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None)

    steps = []
    batch, accum, eval_batch = get("data.batch_size"), get("trainer.grad_accum_steps"), get("data.eval_batch_size")
    if evaluating and batch:
        size = eval_batch or batch
        if size > 1:
            steps.append(f"data.eval_batch_size={size // 2}: evaluation holds no gradients but a batch of {size}")
    elif batch and batch > 1 and accum:
        steps.append(
            f"data.batch_size={batch // 2} trainer.grad_accum_steps={accum * 2}: half the activations, the same "
            f"effective batch of {batch // 2 * accum * 2} per device"
        )
    if get("precision.dtype") is None and get("precision.grad_scaler") is False:  # fp32: no autocast
        steps.append("precision=bf16 (precision=amp before Ampere GPUs): activations in half the memory")
    if get("model.grad_checkpointing") is False:
        steps.append("model.grad_checkpointing=true: recompute activations in backward (~30% more compute)")
    if get("trainer.channels_last") is False and get("data.image_size") is not None and not evaluating:
        steps.append("trainer.channels_last=true (convolutional models): leaner convolution workspaces")
    if torch.cuda.is_available():
        reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
        if reserved > 1.25 * allocated and reserved - allocated > GIB:
            steps.append(
                f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {(reserved - allocated) / GIB:.2f} GiB reserved "
                "but unused (fragmentation)"
            )
    return steps
