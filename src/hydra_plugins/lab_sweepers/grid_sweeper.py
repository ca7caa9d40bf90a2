"""Run a grid sweep (`hydra/sweeper=lab_grid`, the default) in which a failed job does not end the sweep.

Hydra's BasicSweeper re-raises the first failed job's exception after each batch, which skips `on_multirun_end` (no
sweep summary) and drops later batches. Here every job runs and the summary callback reports failures and sets the
exit code; with `sweep.fail_fast=true` no batch starts after a failed job.

Before a batch runs, every job's overrides are checked. Hydra composes each job's config for that, at 0.3 s a time;
here a batch composes once per distinct choice of config groups and applies the other jobs' plain values (`seed=3`)
to a copy as Hydra would, so an unknown key or a wrong type still stops the sweep before any job starts.

A sweep continued with `resume=auto` (lab.sweeps.ownership) keeps its completed jobs and does not run them again,
since Hydra would rewrite their `.hydra/`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from lab import upstream
from lab.run_dir import attempt_subdir
from lab.sweeps.jobs import expand, fail_fast, launch_numbered, launcher_width, outcome

log = logging.getLogger(__name__)


class GridSweeper(upstream.hydra_basic_sweeper()):  # type: ignore[misc]  # Hydra's BasicSweeper
    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        stop_on_failure = fail_fast(self.config)
        batch_size = self.max_batch_size or (launcher_width(self.config, self.launcher) if stop_on_failure else None)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        # a parameter set may run as several jobs (cross-validation folds: lab.sweeps.jobs.expand)
        batches = self.split_arguments(overrides, batch_size)
        self.overrides = [[job for params in batch for job in expand(self.config, params)] for batch in batches]
        jobs = [job for batch in self.overrides for job in batch]  # job n runs jobs[n]

        from lab.sweeps.ownership import claim  # Hydra imports this module in a single run too

        sweep_dir = Path(self.config.hydra.sweep.dir)
        resuming = OmegaConf.select(self.config, "resume") == "auto"
        with claim(sweep_dir, resuming, jobs) as started:
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            completed = {num: job for num, job in started.items() if job.status == "completed"}
            for num, job in sorted(completed.items()):
                log.info("resume=auto: job #%d completed earlier (%s): kept, not run again", num, job.dir)
            for num, job in started.items():  # run again in its dir; its .hydra/ keeps the first attempt's record
                if num not in completed:  # jobs[num] is the list the batches in self.overrides launch
                    jobs[num].append(f"hydra.output_subdir={attempt_subdir(job.dir)}")
            return self._run(completed, stop_on_failure)

    def _run(self, completed: Mapping[int, Any], stop_on_failure: bool) -> list[Sequence[JobReturn]]:
        assert self.launcher is not None and self.overrides is not None  # set by setup() and sweep()
        returns: list[Sequence[JobReturn]] = []
        first_job = 0
        while not self.is_done():
            batch = self.get_job_batch()
            numbered = [(first_job + i, job) for i, job in enumerate(batch) if first_job + i not in completed]
            first_job += len(batch)
            if not numbered:
                continue
            self.validate_batch_is_legal([job for _, job in numbered])  # composition errors, before any job runs
            results = launch_numbered(self.launcher, numbered)
            returns.append(results)
            failed = [num for (num, _), r in zip(numbered, results) if outcome(r).failed]
            if stop_on_failure and failed and not self.is_done():
                left = sum(len(b) for b in self.overrides[self.batch_index :])
                log.error("sweep.fail_fast: job #%d failed; not launching the %d remaining jobs", failed[0], left)
                break
        return returns

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        assert self.hydra_context is not None and self.config is not None  # set by setup()
        loader = self.hydra_context.config_loader
        parser = OverridesParser.create(config_loader=loader)
        groups: set[str] | None = None  # the config groups, known once a first job is composed
        composed: dict[tuple[str | None, ...], DictConfig] = {}  # a job's group choices -> their composed config
        for overrides in batch:
            parsed = parser.parse_overrides(list(overrides))
            if groups is not None and _group_choices(parsed, groups) in composed:
                # The job this was composed for already applied `+key=v` and checked the key could be added, so
                # add-or-replace it here.
                plain = [_adding_again(o) for o in parsed if not _chooses_group(o, groups)]
                config = copy.deepcopy(composed[_group_choices(parsed, groups)])
                upstream.hydra_apply_overrides(plain, config)  # as composing does
                continue
            config = loader.load_sweep_config(master_config=self.config, sweep_overrides=list(overrides))
            groups = set(config.hydra.runtime.choices)
            composed[_group_choices(parsed, groups)] = config


def _adding_again(override: Override) -> Override:
    return dataclasses.replace(override, type=OverrideType.FORCE_ADD) if override.type == OverrideType.ADD else override


def _chooses_group(override: Override, groups: set[str]) -> bool:
    return override.key_or_group in groups or override.key_or_group.startswith("hydra/")


def _group_choices(overrides: list[Override], groups: set[str]) -> tuple[str | None, ...]:
    return tuple(o.input_line for o in overrides if _chooses_group(o, groups))
