"""`eval.lm_eval`: EleutherAI's lm-evaluation-harness on a model=hf causal LM checkpoint, as its users run it.

The checkpoint's transformers model (its LoRA adapter applied) and the run's tokenizer go to lm-eval's `HFLM`, and
`lm_eval.simple_evaluate` scores the tasks: lm-eval's own, or yours from the YAMLs in `include_path`. The results
(lm-eval's `results`, `n-shot` and `n-samples`) are written to lm_eval.json beside eval.json, added to eval.json
under `lm_eval`, and each number logged as `lm_eval/<task>/<metric>` (`acc`, or `acc_<filter>` for a filter other
than lm-eval's `none`).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from lab.extensions.hf import hub
from lab.files import write_json


@functools.lru_cache(maxsize=2)
def task_manager(include_path: str | None) -> Any:
    """lm-eval's index of its tasks and the YAMLs in `include_path`, made once (it reads thousands of YAMLs)."""
    from lm_eval.tasks import TaskManager  # type: ignore[import-untyped]

    return TaskManager(include_path=include_path)


def refuse(settings: Any, restored: Any) -> str | None:
    """Why `settings` cannot score the checkpoint `restored` (not a model=hf causal LM, a task lm-eval does not
    know), or None."""
    from lab.extensions.hf.models import HfModel

    if not isinstance(restored.model, HfModel) or not restored.model.causal:
        return (
            f"eval.lm_eval scores a causal language model; {restored.path} is a model="
            f"{restored.config['model'].get('name')} {restored.meta.get('task', 'classification')} checkpoint: "
            "drop eval.lm_eval.tasks, or give a model=hf task=language_model checkpoint"
        )
    folder = settings.include_path
    if folder is not None and not Path(folder).is_dir():
        return f"eval.lm_eval.include_path={folder} is not a folder: give the folder of your task YAMLs"
    unknown = [name for name in settings.tasks if name not in task_manager(folder).all_tasks]
    if unknown:
        return (
            f"eval.lm_eval.tasks names {', '.join(unknown)}, which lm-eval does not know: name a task of a YAML in "
            "eval.lm_eval.include_path, or one of lm-eval's (`lm_eval --tasks list`)"
        )
    return None


def run(settings: Any, evaluation: Any) -> None:
    """Score `settings.tasks` (an `LmEvalConfig`) on `evaluation`'s model; add the results to `evaluation`."""
    import lm_eval  # type: ignore[import-untyped]
    from lm_eval.models.huggingface import HFLM  # type: ignore[import-untyped]
    from peft import PeftModel

    restored = evaluation.restored
    network = evaluation.model.network
    if isinstance(network, PeftModel):  # its LoRA layers sit inside the transformers model it wraps
        network = network.get_base_model()
    tokenizer = hub.run_tokenizer(restored)
    found = lm_eval.simple_evaluate(
        model=HFLM(pretrained=network, tokenizer=tokenizer, batch_size=settings.batch_size),
        tasks=list(settings.tasks),
        num_fewshot=settings.num_fewshot,
        limit=settings.limit,
        task_manager=task_manager(settings.include_path),
        log_samples=False,
    )
    results = {key: found.get(key, {}) for key in ("results", "n-shot", "n-samples")}
    path = evaluation.run_dir / "lm_eval.json"
    write_json(path, results)
    evaluation.sections["lm_eval"] = results["results"]
    evaluation.files.append(path)
    for task, scores in results["results"].items():
        for key, value in scores.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                metric, _, kept = key.partition(",")
                name = metric if kept in ("", "none") else f"{metric}_{kept}"
                evaluation.figures[f"lm_eval/{task}/{name}"] = float(value)
