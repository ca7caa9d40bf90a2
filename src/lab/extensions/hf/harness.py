"""`eval.lm_eval`: EleutherAI's lm-evaluation-harness on a model=hf causal LM checkpoint, as its users run it.

The checkpoint's transformers model (its LoRA adapter applied) and the run's tokenizer go to lm-eval's `HFLM`, and
`lm_eval.simple_evaluate` scores the tasks: lm-eval's own, or yours from the YAMLs in `include_path`. The results
(lm-eval's `results`, `n-shot` and `n-samples`) are written to lm_eval.json beside eval.json, added to eval.json
under `lm_eval`, and each number logged as `lm_eval/<task>/<metric>` (`acc`, or `acc_<filter>` for a filter other
than lm-eval's `none`).
"""

from __future__ import annotations

import math
from typing import Any

from lab.extensions.hf import hub
from lab.files import write_json


def refuse(restored: Any) -> str | None:
    """Why the checkpoint `restored` is not one lm-eval scores (not a model=hf causal LM), or None."""
    from lab.extensions.hf.models import HfModel

    if isinstance(restored.model, HfModel) and restored.model.causal:
        return None
    return (
        f"eval.lm_eval scores a causal language model; {restored.path} is a model="
        f"{restored.config['model'].get('name')} {restored.meta.get('task', 'classification')} checkpoint: drop "
        "eval.lm_eval.tasks, or give a model=hf task=language_model checkpoint"
    )


def run(settings: Any, evaluation: Any) -> None:
    """Score `settings.tasks` (an `LmEvalConfig`) on `evaluation`'s model; add the results to `evaluation`."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from peft import PeftModel

    restored = evaluation.restored
    network = evaluation.model.network
    if isinstance(network, PeftModel):  # its LoRA layers sit inside the transformers model it wraps
        network = network.get_base_model()
    tokenizer = hub.load_tokenizer(restored.meta.get("tokenizer") or restored.config["model"]["name_or_path"])
    found = lm_eval.simple_evaluate(
        model=HFLM(pretrained=network, tokenizer=tokenizer, batch_size=settings.batch_size),
        tasks=list(settings.tasks),
        num_fewshot=settings.num_fewshot,
        limit=settings.limit,
        task_manager=TaskManager(include_path=settings.include_path),
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
