"""Export a model=hf checkpoint as a directory transformers' `from_pretrained` loads:

    python -m lab.extensions.hf.export <checkpoint> <directory> [--adapter]

By default the LoRA adapter is merged into the base weights, so the directory is a plain transformers model; with
--adapter it holds the adapter alone (PEFT's `adapter_config.json` names the base model's id and revision), which
`peft.AutoPeftModelFor...from_pretrained` loads over the base model. The tokenizer is saved beside it, and a
classifier's config names the classes. The directory must not exist yet: it is written in a staging folder and
renamed into place once complete, so a killed export leaves no partial model under its name.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from lab import cli
from lab.errors import UserError
from lab.files import staged

log = logging.getLogger(__name__)


def export(checkpoint: Path, out: Path, adapter: bool = False) -> Path:
    """Write the checkpoint's model (merged, or its LoRA adapter alone) and its tokenizer to `out`; return `out`."""
    from lab.extensions.hf import hub
    from lab.extensions.hf.models import HfModel
    from lab.workflows import restore

    out = out.expanduser()
    if out.exists():
        raise UserError(f"{out} exists: name a new directory for the export (nothing there is overwritten)")
    restored = restore.rebuild(checkpoint)
    settings: dict[str, Any] = restored.config["model"]
    if not isinstance(restored.model, HfModel):
        raise UserError(f"{checkpoint} was trained with model={settings.get('name')}; this export takes model=hf")
    network: Any = restored.model.network  # a transformers model, or PEFT's around it
    lora = bool((settings.get("lora") or {}).get("r"))
    if adapter and not lora:
        raise UserError(f"--adapter: {checkpoint} has no LoRA adapter (model.lora.r was null); export it merged")
    if lora and adapter:
        # the architecture was rebuilt from its config, so PEFT did not see where the base weights come from
        network.peft_config["default"].base_model_name_or_path = settings["name_or_path"]
        network.peft_config["default"].revision = settings.get("revision")
    elif lora:
        network = network.merge_and_unload()
    names = restored.meta.get("class_names")
    if names and getattr(network.config, "num_labels", None) == len(names):
        network.config.id2label = dict(enumerate(names))
        network.config.label2id = {name: i for i, name in enumerate(names)}
    tokenizer = hub.load_tokenizer(restored.meta.get("tokenizer") or settings["name_or_path"], settings.get("revision"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with staged(out.parent, out.name) as stage:
        network.save_pretrained(stage)
        tokenizer.save_pretrained(stage)
        os.replace(stage, out)
    log.info("exported %s (%s) to %s", checkpoint, "the LoRA adapter" if adapter else "merged weights", out)
    return out


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab.extensions.hf.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("checkpoint", type=Path, help="a model=hf run's checkpoint (<run dir>/checkpoints/best.pt)")
    parser.add_argument("directory", type=Path, help="the directory to write; it must not exist")
    parser.add_argument("--adapter", action="store_true", help="write the LoRA adapter alone, not merged weights")
    return parser


def main() -> None:
    args = parser().parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with cli.user_errors():
        print(f"export: {export(args.checkpoint, args.directory, args.adapter)}")


if __name__ == "__main__":
    main()
