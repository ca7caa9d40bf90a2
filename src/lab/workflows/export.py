"""Export a checkpoint to each format, check each against the eager model, and write the manifest; return the worst
max |output difference|.

Each artifact is written into a staging folder (lab.files.staged) and run there by the runner inference uses, on
real validation samples; only one that matches the eager model is moved to its final name. So a killed export
leaves no unchecked file under a final name. One above `export.tolerance` is never published; its figures go under
`failed` and the run exits non-zero.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from lab.config.tools import ExportOptions, ExportStepConfig
from lab.data.loaders import make_loader
from lab.errors import UserError
from lab.exporting import manifest, parity, steps, writers
from lab.files import publish, remove_stale_temps, staged, write_json
from lab.inference.backends import EagerBackend, artifact_backend
from lab.tasks import outputs as model_outputs
from lab.workflows import restore
from lab.workflows.common import hydra_run_dir, linked_tracker

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> float:
    run_dir = Path(run_dir) if run_dir is not None else hydra_run_dir()
    restored = restore.rebuild(cfg.ckpt_path)
    opts = cast(ExportOptions, OmegaConf.to_object(cfg.export))  # the export node with its steps' settings, typed
    # the step that writes export.formats' one format itself (an extension's), or None for the core's
    own = next((step for step in opts.steps() if opts.formats[0] in step.formats), None)
    if own is not None:
        return _own_format(cfg, run_dir, restored, own)
    data_cfg = restore.data_config(restored, cfg.data)
    # an export step that reads training samples (INT8 calibration) sees them unaugmented, as inference will
    plain = {"augment": False} if "augment" in restored.config["data"] else {}
    datamodule = restore.rebuild_data(restored, {**cast(dict, OmegaConf.to_container(cfg.data)), **plain})
    val_loader = make_loader(datamodule.val, data_cfg, train=False, generator=None, pin_memory=False)
    task = restored.task
    dims = tuple(opts.dynamic_dims) if opts.dynamic_dims is not None else tuple(task.dynamic_dims)
    batches = parity.sample_batches(val_loader, opts.parity_samples, dims)
    example = batches[0][: writers.EXAMPLE_BATCH]
    eager = EagerBackend(restored.model)  # CPU, fp32, eval mode; every artifact must match it
    reference = [eager(b) for b in batches]
    layout = model_outputs.check(reference[0], task)
    steps.check(opts, reference[0], layout)  # refuse a step that cannot take these outputs, before any work
    names = () if layout.single else layout.names

    tracker, prov = linked_tracker(
        cfg,
        run_dir,
        "export",
        restored.source(),
        restored.config["model"],
        data_effective=OmegaConf.to_container(data_cfg, resolve=True),
    )
    with tracker.session():
        for stale in remove_stale_temps(run_dir):  # a killed export's staging folders, never verified
            log.warning("removed %s: left by an export that was killed before its checks ended", stale)
        artifacts, failed, opset = {}, {}, None
        for fmt in opts.formats:
            with staged(run_dir, writers.WRITERS[fmt][0]) as stage:
                written = writers.write(fmt, restored.model, example, stage, opts.opset, dims, names)
                opset = written.opset or opset
                backend = artifact_backend(written.files[0], layout=layout)
                checked = parity.compare(backend, batches, reference, opts.tolerance, task.agreement, layout)
                entry = _record(fmt, written, checked)
                if checked.passed:
                    publish(written.files, run_dir)
                    artifacts[fmt] = entry
                else:
                    failed[fmt] = entry
        train = functools.partial(
            make_loader, datamodule.train, data_cfg, train=False, generator=None, pin_memory=False
        )
        added = steps.run(opts, steps.Export(run_dir, task, example, val_loader, train, artifacts))
        path = run_dir / manifest.MANIFEST
        write_json(
            path,
            manifest.build(
                meta=restored.meta,
                task_config=restore.task_config(restored.config),
                example=example,
                output=reference[0],
                dynamic_dims=dims,
                model_config=restored.config["model"],
                source_run=restored.source(),
                provenance=prov,
                artifacts=artifacts,
                failed=failed,
                opset=opset,
                tolerance=opts.tolerance,
                sections=added.sections,
                layout=layout,
            ),
        )
        tracker.save_file(path)
        figures = {**_figures({**artifacts, **failed}), **added.figures}
        tracker.log(figures, step=restored.global_step)
        tracker.summary(figures)
        if failed:
            raise UserError(_failure_message(failed, opts.tolerance, path))
    log.info("exported %s to %s", ", ".join(artifacts), run_dir)
    return max(a["parity"]["max_abs_diff"] for a in artifacts.values() if "parity" in a)


def _own_format(cfg: DictConfig, run_dir: Path, restored: restore.Restored, step: ExportStepConfig) -> float:
    """Export the format an extension's step writes (a directory its library loads), checked by the step itself."""
    fmt = cfg.export.formats[0]
    why = step.refuse_checkpoint(fmt, restored)
    if why is not None:
        raise UserError(why)
    data_cfg = restore.data_config(restored, cfg.data)
    datamodule = restore.rebuild_data(restored, cfg.data)
    val_loader = make_loader(datamodule.val, data_cfg, train=False, generator=None, pin_memory=False)
    tracker, _ = linked_tracker(cfg, run_dir, "export", restored.source(), restored.config["model"])
    with tracker.session():
        for stale in remove_stale_temps(run_dir):
            log.warning("removed %s: left by an export that was killed before its checks ended", stale)
        with staged(run_dir, fmt) as stage:
            entry = step.write_format(fmt, restored, val_loader, stage, cfg.export.tolerance)
            os.replace(stage, run_dir / fmt)  # the whole directory appears at once, only once checked
        figures = {f"export/{fmt}/max_abs_diff": entry["parity"]["max_abs_diff"]}
        tracker.log(figures, step=restored.global_step)
        tracker.summary(figures)
    log.info("exported %s to %s", fmt, run_dir / fmt)
    return float(entry["parity"]["max_abs_diff"])


def _failure_message(failed: dict[str, dict], tolerance: float, manifest_path: Path) -> str:
    parts = [
        f"{fmt} max |outputs - eager| = {a['parity']['max_abs_diff']:.3g} > export.tolerance={tolerance:g}"
        f"{_per_output(a['parity'])}{_agreement(a['parity'])}{_error(a['parity'])}, {a['file']} not written"
        for fmt, a in failed.items()
    ]
    return f"parity check failed: {'; '.join(parts)}; figures in {manifest_path}"


def _error(parity: dict[str, Any]) -> str:
    return f" ({parity['error']})" if parity.get("error") else ""


def _per_output(parity: dict[str, Any]) -> str:
    """For a model with several outputs, say which differ and by how much."""
    each = parity.get("max_abs_diff_per_output")
    return f" ({', '.join(f'{name} {diff:.3g}' for name, diff in each.items())})" if each else ""


def _agreement(parity: dict[str, Any]) -> str:
    share = parity["top1_agreement"]
    return "" if share is None else f" (top-1 agreement {share:.4f})"


def _record(fmt: str, written: writers.Written, checked: parity.Parity) -> dict[str, Any]:
    """Return the manifest entry of one staged artifact, with file names as they will be once published."""
    main, figures = written.files[0], checked.as_dict()
    entry: dict[str, Any] = {
        "file": main.name,
        "files": [f.name for f in written.files],
        "bytes": sum(f.stat().st_size for f in written.files),
        "sha256": manifest.sha256(main),
        "parity": figures,
        "notes": written.notes,
    }
    log.info(
        "%s: %s, max |outputs - eager| %.3g%s on %d validation samples (batch sizes %s, input shapes %s)%s%s",
        fmt,
        main.name,
        checked.max_abs_diff,
        _per_output(figures),
        checked.samples,
        checked.batch_sizes,
        checked.input_shapes,
        _agreement(figures),
        _error(figures),
    )
    if checked.passed:
        entry["status"] = "ok"
    else:  # never published, so nothing downstream can pick it up
        entry["status"] = "failed_parity"
        log.error("%s: above export.tolerance=%g, %s not written", fmt, checked.tolerance, main.name)
    return entry


def _figures(artifacts: dict[str, dict]) -> dict[str, float]:
    """Flatten the parity figures to wandb metric names such as export/<format>/max_abs_diff."""
    out: dict[str, float] = {}
    for fmt, a in artifacts.items():
        if "parity" in a:
            out[f"export/{fmt}/max_abs_diff"] = a["parity"]["max_abs_diff"]
            for name, diff in (a["parity"].get("max_abs_diff_per_output") or {}).items():
                out[f"export/{fmt}/max_abs_diff/{name}"] = diff
            if a["parity"]["top1_agreement"] is not None:
                out[f"export/{fmt}/top1_agreement"] = a["parity"]["top1_agreement"]
            out[f"export/{fmt}/passed"] = float(a["status"] == "ok")
    return out
