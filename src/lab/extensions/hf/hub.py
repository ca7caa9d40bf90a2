"""Find a transformers model or tokenizer offline first: a local directory, the Hugging Face cache, then the hub.

A compute node without a network stops here, before a run writes anything, with one line naming the cache and the
command that fills it, not after a minute of download retries.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lab.errors import UserError
from lab.files import staged
from lab.network import reachable


def locate(name_or_path: str, revision: str | None = None, key: str = "model.name_or_path") -> dict[str, Any]:
    """Return the `from_pretrained` arguments that read `name_or_path` without a network when the files are here.

    A local directory is read as it is; a hub id from the cache (`local_files_only`) when its config is cached,
    else from the hub when it answers. Otherwise raise a UserError naming the cache and the command that fills it."""
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        return {"pretrained_model_name_or_path": str(local)}
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name_or_path)
    except HFValidationError as err:
        raise UserError(
            f"{key}={name_or_path}: no such directory, and not a hub id (name or namespace/name); give a directory "
            "save_pretrained wrote or a hub id"
        ) from err
    found = {"pretrained_model_name_or_path": name_or_path, "revision": revision}
    for filename in ("config.json", "tokenizer_config.json"):
        if isinstance(try_to_load_from_cache(name_or_path, filename, revision=revision), str):
            return found | {"local_files_only": True}
    if not constants.HF_HUB_OFFLINE and reachable(constants.ENDPOINT):
        return found
    fetch = f"hf download {name_or_path}" + (f" --revision {revision}" if revision else "")
    raise UserError(
        f"{key}={name_or_path}: not a local directory, not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
        f"and this machine cannot reach the hub; run `{fetch}` on a machine with a network (a login node) with the "
        "same HF_HOME, or pass a local directory"
    )


TOKENIZER = "tokenizer"  # the folder in a training run's dir that holds its tokenizer


def load_tokenizer(name_or_path: str, revision: str | None = None) -> Any:
    """Return the transformers tokenizer of `name_or_path` (a local directory or a hub id), found offline first."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(**locate(name_or_path, revision, key="data.tokenizer"))


def save_run_tokenizer(meta: dict[str, Any], run_dir: Path) -> None:
    """Save the tokenizer `meta` names (if any) into `<run_dir>/tokenizer/` as the data used it (its padding token
    too, when data.pad_token=eos gave it one), whole or not at all; a resumed run keeps the copy it has."""
    target = run_dir / TOKENIZER
    if not meta.get("tokenizer") or target.is_dir():
        return
    tokenizer = load_tokenizer(meta["tokenizer"])
    if tokenizer.pad_token is None and meta.get("pad_token_id") is not None:
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(int(meta["pad_token_id"]))
    with staged(run_dir, TOKENIZER) as stage:
        tokenizer.save_pretrained(stage)
        os.replace(stage, target)


def read_run_tokenizer(checkpoint: Path, config: dict[str, Any], meta: dict[str, Any]) -> None:
    """Point a checkpoint's data_meta and data config at its run's copy of the tokenizer, in place.

    The run's copy comes first: it is exactly what the run trained with, where the original path may have changed
    or gone and a hub id may now resolve to a newer revision or not be cached on this machine. Only a checkpoint in
    its run dir (`<run dir>/checkpoints/`) has one; one copied elsewhere keeps the original, found offline first."""
    name, run_dir = meta.get("tokenizer"), checkpoint.absolute().parent.parent
    copy = run_dir / TOKENIZER
    if not name or checkpoint.parent.name != "checkpoints" or not copy.is_dir():
        return
    meta["tokenizer"] = str(copy)
    if (config.get("data") or {}).get("tokenizer") == name:  # the data it tokenized is rebuilt with the same copy
        config["data"]["tokenizer"] = str(copy)


def run_tokenizer(restored: Any) -> Any:
    """Return a rebuilt checkpoint's tokenizer: the data's (the run's copy when it has one), else the model's."""
    settings = restored.config["model"]
    return load_tokenizer(restored.meta.get("tokenizer") or settings["name_or_path"], settings.get("revision"))


def load_config(name_or_path: str, revision: str | None = None) -> Any:
    """Return the transformers config of `name_or_path`, found offline first."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(**locate(name_or_path, revision))
