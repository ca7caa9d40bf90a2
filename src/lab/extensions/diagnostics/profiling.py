"""Profile a few training steps with torch.profiler (``callback=profile`` or ``debug=profile``).

It writes operator tables and a Chrome trace, and names the bottleneck in one line.

    with StepProfiler(ProfileConfig(), run_dir, tracker, device) as profiler:  # options.ProfileConfig
        for batch in batches:
            train_step(batch)
            profiler.step()          # after each optimizer step: one ProfilerStep#n range per step

The schedule skips ``wait`` steps, warms up for ``warmup`` and records ``active`` steps once. When they end, the
run dir gets ``profile_trace.json`` (open it in https://ui.perfetto.dev or chrome://tracing) and
``profile_table.txt`` (top operators by self CPU time, and by self CUDA time on a GPU). Both are attached to the
wandb run. The log gets the table and one line saying where step time goes:

    profile: bottleneck forward (52% of step time) | data wait 3%, host-device copies 0%, forward 52%, ...

Step time is split by range name:
  - data wait: the DataLoader's ``enumerate(DataLoader)`` ranges, as the trainer's ``train/data_wait`` measures;
  - host-device copies: tensor copies at the top of a step;
  - optimizer: ``Optimizer.step``, ``zero_grad`` and the foreach ops of gradient clipping;
  - backward: autograd's ``evaluate_function`` ranges;
  - forward: every other operator at the top of a step, loss included;
  - other: what no range covers (Python between operators, logging, checkpoints).
On CUDA a range counts its kernels' device time when that is longer than its CPU time, since launches are
asynchronous.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from lab.training.callbacks import Callback

log = logging.getLogger(__name__)

TRACE_FILE = "profile_trace.json"
TABLE_FILE = "profile_table.txt"

# category -> (its name in the report line, what to try when it dominates)
CATEGORIES: dict[str, tuple[str, str]] = {
    "data": (
        "data wait",
        "the step waits for batches: try more loader workers (data.num_workers, data.persistent_workers), "
        "lighten __getitem__, or keep a small dataset on the device",
    ),
    "copy": (
        "host-device copies",
        "pinned memory makes the copies asynchronous (data.pin_memory=true, the default on CUDA); "
        "keep a small dataset on the device, move less (uint8 images, normalise on the device)",
    ),
    "forward": (
        "forward",
        "compute-bound forward: precision=bf16 (or amp), trainer.compile=true, trainer.channels_last=true for "
        "convolutions, or a larger data.batch_size if the device is not full",
    ),
    "backward": (
        "backward",
        "compute-bound backward: precision=bf16 (or amp), trainer.compile=true; gradient checkpointing "
        "(model.grad_checkpointing) trades compute for memory, so turn it off when memory allows",
    ),
    "optimizer": (
        "optimizer",
        "many small parameter tensors: a fused optimizer (chosen by itself on CUDA) or foreach=true, "
        "fewer optimizer steps (trainer.grad_accum_steps)",
    ),
    "other": (
        "other (Python, logging, checkpoints)",
        "host-side overhead between operators: trainer.compile=true, a larger data.batch_size, "
        "less frequent logging (trainer.log_every_n_steps)",
    ),
}
_COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::contiguous")


@dataclass
class Breakdown:
    """Microseconds of the recorded steps, in total and per category of `CATEGORIES`."""

    steps: int
    total_us: float
    per_category_us: dict[str, float]

    def share(self, category: str) -> float:
        return self.per_category_us.get(category, 0.0) / self.total_us if self.total_us > 0 else 0.0

    @property
    def bottleneck(self) -> str:
        return max(self.per_category_us, key=self.per_category_us.__getitem__)

    def line(self) -> str:
        """Return one line: the bottleneck, then each category's share of step time."""
        if self.steps == 0 or self.total_us <= 0:
            return "profile: no training step was recorded"
        name, _ = CATEGORIES[self.bottleneck]
        shares = ", ".join(f"{CATEGORIES[c][0]} {self.share(c):.0%}" for c in CATEGORIES)
        return (
            f"profile: bottleneck {name} ({self.share(self.bottleneck):.0%} of step time, "
            f"{self.total_us / self.steps / 1000:.2f} ms per step) | {shares}"
        )

    def advice(self) -> str:
        return CATEGORIES[self.bottleneck][1]


def _category(name: str) -> str:
    if name.startswith("enumerate(DataLoader)"):
        return "data"
    if name.startswith(("Optimizer.", "aten::_foreach_", "aten::_amp_foreach_")):
        return "optimizer"  # Optimizer.step#AdamW.step, zero_grad; gradient clipping and unscaling (foreach ops)
    if name.startswith("autograd::engine::evaluate_function"):
        return "backward"
    if name in _COPY_OPS:
        return "copy"
    return "forward"


def breakdown(events: Iterable[Any], on_device: bool, steps: int | None = None) -> Breakdown:
    """Split step time by category from profiler FunctionEvents (``prof.events()``).

    The ``ProfilerStep`` ranges are the steps. Ranges directly inside one are categorised by name, and time they
    do not cover is "other". On CUDA, autograd runs backward on its own threads, outside any step range, so those
    ranges are counted separately. Only the first `steps` ranges count: a run that ends while recording leaves a
    last range that is not a full step."""
    events = list(events)
    ranges = [e for e in events if e.name.startswith("ProfilerStep")]  # ProfilerStep#n, or ProfilerStep* once ready
    ranges.sort(key=lambda e: e.time_range.start if hasattr(e, "time_range") else 0)
    step_ranges = ranges[:steps]
    step_ids = {id(e) for e in step_ranges}
    per = dict.fromkeys(CATEGORIES, 0.0)

    def cost(event: Any) -> float:
        cpu = float(event.cpu_time_total)
        return max(cpu, float(event.device_time_total)) if on_device else cpu

    inside = 0.0
    for event in events:
        parent = event.cpu_parent
        if parent is not None and id(parent) in step_ids:
            per[_category(event.name)] += cost(event)
            inside += float(event.cpu_time_total)
        elif parent is None and id(event) not in step_ids and _category(event.name) == "backward":
            per["backward"] += cost(event)  # the autograd engine's own device threads
    total = sum(float(e.cpu_time_total) for e in step_ranges)
    per["other"] = max(0.0, total - inside)
    return Breakdown(len(step_ranges), total, per)


class StepProfiler(Callback):
    """Run torch.profiler with ``schedule(wait, warmup, active)`` around training, stepped after each optimizer step.

    Results are written and logged when the active steps end, or when the run ends during them. Use it as a Trainer
    callback (``callback=profile``, rank 0) or as a context manager around your own loop."""

    def __init__(
        self,
        cfg: Any,  # callbacks.profile (options.ProfileConfig): wait, warmup, active, row_limit
        run_dir: str | Path,
        tracker: Any = None,  # lab.tracking.Tracker, to attach the files to the wandb run
        device: torch.device | None = None,
    ) -> None:
        self.cfg, self.run_dir, self.tracker = cfg, Path(run_dir), tracker
        self.device = device or torch.device("cpu")
        self.on_device = self.device.type == "cuda"
        self.steps = 0
        self.result: Breakdown | None = None
        self.table = ""
        self._profile: profile | None = None

    @property
    def planned(self) -> int:
        return self.cfg.wait + self.cfg.warmup + self.cfg.active

    def __enter__(self) -> StepProfiler:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_device else [])
        self._profile = profile(
            activities=activities,
            schedule=schedule(wait=self.cfg.wait, warmup=self.cfg.warmup, active=self.cfg.active, repeat=1),
            on_trace_ready=self._ready,
        )
        self._profile.__enter__()
        log.info(
            "profiling training steps %d-%d (callbacks.profile: wait %d, warmup %d, active %d)",
            self.cfg.wait + self.cfg.warmup + 1,
            self.planned,
            self.cfg.wait,
            self.cfg.warmup,
            self.cfg.active,
        )
        return self

    def step(self) -> None:
        """Call once after each training (optimizer) step."""
        self.steps += 1
        if self._profile is not None and self.result is None:
            self._profile.step()

    def fitting(self, trainer: Any) -> StepProfiler:
        return self

    def on_train_step_end(self, trainer: Any) -> None:
        self.step()

    def __exit__(self, *exc: object) -> None:
        prof, self._profile = self._profile, None
        if prof is None:
            return
        recording = self.steps > self.cfg.wait + self.cfg.warmup
        prof.__exit__(*exc)  # during the active steps, stopping hands the partial trace to _ready
        if self.result is None and not recording and exc[0] is None:
            log.warning(
                "profile: the run ended after %d training steps, before the recorded ones (steps %d-%d); raise "
                "trainer.limit_train_batches / trainer.max_steps or lower callbacks.profile.wait / warmup",
                self.steps,
                self.cfg.wait + self.cfg.warmup + 1,
                self.planned,
            )

    # ------------------------------------------------------------------ results
    def _ready(self, prof: profile) -> None:
        averages = prof.key_averages()
        tables = [
            "top operators by self CPU time\n"
            + averages.table(sort_by="self_cpu_time_total", row_limit=self.cfg.row_limit)
        ]
        if self.on_device:
            tables.append(
                "top operators by self CUDA time\n"
                + averages.table(sort_by="self_device_time_total", row_limit=self.cfg.row_limit)
            )
        completed = min(self.cfg.active, self.steps - self.cfg.wait - self.cfg.warmup)
        self.result = breakdown(prof.events(), self.on_device, steps=completed)
        self.table = "\n".join([self.result.line(), f"try: {self.result.advice()}", "", *tables])
        if self.tracker is not None and not getattr(self.tracker, "is_writer", True):
            return  # one rank writes the run dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        trace, table = self.run_dir / TRACE_FILE, self.run_dir / TABLE_FILE
        prof.export_chrome_trace(str(trace))
        table.write_text(self.table + "\n")
        log.info("%s\n%s", "\n".join(tables), self.result.line())
        log.info("profile: try %s", self.result.advice())
        log.info("profile: Chrome trace %s (open in https://ui.perfetto.dev), table %s", trace, table)
        if self.tracker is not None:
            self.tracker.save_file(trace)
            self.tracker.save_file(table)
            self.tracker.summary(
                {f"profile/{c}_share": round(self.result.share(c), 4) for c in CATEGORIES}
                | {"profile/bottleneck": self.result.bottleneck}
            )
