"""`model=hf` under dist=fsdp without the whole model on any rank: each rank reads only its shards of the weights.

The core builds the model on the meta device (transformers' `from_config`, no memory), shards it per block with
`fully_shard`, then calls `HfModelConfig.materialise`. Here each rank allocates its local shards and fills them with
just those slices of the `*.safetensors` file(s), read through `safe_open(...).get_slice(name)`: the file is
memory-mapped, so only the slices a rank asks for are read. The weights equal those `from_pretrained` loads and
dist=fsdp then shards, bit for bit (the `model.dtype` cast included):

- tied weights are one parameter under two names; whichever name the file stores it under is read;
- buffers the file does not hold (rotary `inv_freq`) are computed as `from_pretrained` computes them, by the
  model's own `_init_weights`;
- LoRA: PEFT wraps the meta-built base, as it wraps the loaded one, and its adapter weights are drawn again in the
  order PEFT drew them on the CPU (its layers' constructors, then `reset_lora_parameters`), from the build's seed.

Weights stored otherwise (`pytorch_model.bin`), a parameter the file lacks (a new classification head, embeddings
resized for the tokenizer) or of another shape are drawn at random by `from_pretrained`, which cannot be replayed:
`meta_init_blocker`/`meta_model_blocker` say so, and the core builds the whole model as before (dist.meta_init=auto
logs the reason; true refuses).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lab.extensions.hf import hub
from lab.extensions.hf.models import _pretrained

log = logging.getLogger(__name__)

INDEX, SINGLE = "model.safetensors.index.json", "model.safetensors"


def weight_files(name_or_path: str, revision: str | None) -> dict[str, Path] | None:
    """Return the file holding each tensor name of the model's safetensors weights, or None if it has none."""
    from safetensors import safe_open
    from transformers.utils import cached_file

    located = hub.locate(name_or_path, revision)
    where = located.pop("pretrained_model_name_or_path")

    def find(filename: str) -> Path | None:
        found = cached_file(
            where,
            filename,
            **located,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
        )
        return Path(found) if found else None

    index = find(INDEX)
    if index is not None:
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        files = {filename: find(filename) for filename in set(weight_map.values())}
        if None in files.values():  # a part not downloaded
            return None
        return {name: files[filename] for name, filename in weight_map.items()}  # type: ignore[misc]
    single = find(SINGLE)
    if single is None:
        return None
    with safe_open(single, framework="pt") as handle:
        return dict.fromkeys(handle.keys(), single)


def unreadable(cfg: Any) -> str | None:
    """Return why no rank can read just its shards of `cfg`'s pretrained weights, or None."""
    if not cfg.pretrained:
        return "model.pretrained=false draws random weights through transformers' init, which the replay cannot redo"
    if weight_files(cfg.name_or_path, cfg.revision) is None:
        return (
            f"model.name_or_path={cfg.name_or_path} has no *.safetensors weights (pytorch_model.bin?), so each rank "
            "cannot read just its shards"
        )
    return None


def _stored(network: Any) -> Iterator[tuple[list[str], nn.Parameter | torch.Tensor]]:
    """Yield each parameter and persistent buffer of the transformers `network` (LoRA's aside) once, with every name
    it has there as the checkpoint names it: tied weights have two, PEFT's `base_layer` is not in the name."""
    names: dict[int, list[str]] = {}
    tensors: dict[int, torch.Tensor] = {}
    computed = {name for name, _ in network.named_non_persistent_buffers()}
    items = [*network.named_parameters(remove_duplicate=False)]
    items += [(name, b) for name, b in network.named_buffers(remove_duplicate=False) if name not in computed]
    for name, tensor in items:
        if ".lora_" in name:
            continue
        names.setdefault(id(tensor), []).append(name.replace(".base_layer.", "."))
        tensors[id(tensor)] = tensor
    for key, aliases in names.items():
        yield aliases, tensors[key]


def _file_name(network: Any, aliases: list[str], files: dict[str, Path]) -> str | None:
    """Return the name the file stores a tensor under: one of its names, with or without the base model's prefix."""
    prefix = f"{network.base_model_prefix}."
    for name in aliases:
        for candidate in (name, name.removeprefix(prefix), prefix + name):
            if candidate in files:
                return candidate
    return None


def blocker(cfg: Any, model: nn.Module) -> str | None:
    """Return why the meta-built `model` cannot be filled from its safetensors files, or None if every tensor the file
    must give is there under the model's name and with its shape."""
    from safetensors import safe_open

    files = weight_files(cfg.name_or_path, cfg.revision)
    if files is None:
        return unreadable(cfg)
    network = _pretrained(model)
    for aliases, tensor in _stored(network):
        name = _file_name(network, aliases, files)
        if name is None:
            return (
                f"{aliases[0]} is not in model.name_or_path={cfg.name_or_path}'s weights (a new head, or a renamed "
                "key), so from_pretrained draws it at random"
            )
        with safe_open(files[name], framework="pt") as handle:
            shape = list(handle.get_slice(name).get_shape())
        if shape != list(tensor.shape):
            return f"{aliases[0]} is {list(tensor.shape)} in the model but {shape} in its weights (resized embeddings?)"
    return None


def materialise(cfg: Any, model: nn.Module, device: torch.device, rng_state: torch.Tensor) -> None:
    """Give the meta-built, sharded `model` its local shards on `device`, read from the safetensors files."""
    from safetensors import safe_open

    model.to_empty(device=device)
    network = _pretrained(model)
    files = weight_files(cfg.name_or_path, cfg.revision)
    assert files is not None  # blocker() made sure
    with torch.no_grad():
        for aliases, tensor in _stored(network):
            name = _file_name(network, aliases, files)
            assert name is not None  # blocker() made sure
            local, index = _local_part(tensor)
            if local.numel():
                # a file opened per tensor: the mapped pages read stay resident only while it is open
                with safe_open(files[name], framework="pt") as handle:
                    local.copy_(handle.get_slice(name)[index])
    _compute_buffers(network)
    _draw_lora(model, rng_state)
    log.info("model=hf: each rank read its shards of the weights from %d safetensors file(s)", len(set(files.values())))


def _local_part(tensor: torch.Tensor) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """Return this rank's part of `tensor` (its local shard if it is a DTensor) and where that lies in the whole."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if not isinstance(tensor, DTensor):
        return tensor, tuple(slice(0, size) for size in tensor.shape)
    shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    return tensor.to_local(), tuple(slice(start, start + size) for start, size in zip(offset, shape, strict=True))


def _compute_buffers(network: Any) -> None:
    """Compute the buffers the file does not hold (rotary `inv_freq`), as from_pretrained does: the model's own
    `_init_weights` on each module owning one. Its own parameters are swapped for scratch ones meanwhile, so their
    values (just read) stay, and the draws come from a forked generator, as the global one must not move."""
    owners = {name.rpartition(".")[0] for name, _ in network.named_non_persistent_buffers()}
    for owner in sorted(owners):
        module = network.get_submodule(owner)
        with _whole(module), torch.random.fork_rng(devices=[]):
            network._init_weights(module)


@contextlib.contextmanager
def _whole(module: nn.Module) -> Iterator[None]:
    """Swap the module's own parameters for whole CPU ones while inside; its own (shards) come back on leaving."""
    kept = {name: p for name, p in module._parameters.items() if p is not None}
    module._parameters.update(
        {name: nn.Parameter(torch.empty(p.shape, dtype=p.dtype), p.requires_grad) for name, p in kept.items()}
    )
    try:
        yield
    finally:
        module._parameters.update(kept)


def _draw_lora(model: nn.Module, rng_state: torch.Tensor) -> None:
    """Draw the LoRA adapters' initial weights as PEFT did when it wrapped the base on the CPU, from `rng_state`:
    per adapted layer, in module order, lora_A's and lora_B's `nn.Linear` constructors, then its
    `reset_lora_parameters`. Each rank draws them whole and keeps its shard. No LoRA: nothing is drawn."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    peft = next((m for m in model.modules() if isinstance(m, PeftModel)), None)
    if peft is None:
        return
    torch.random.set_rng_state(rng_state)
    with torch.no_grad():
        for layer in (m for m in model.modules() if isinstance(m, LoraLayer)):
            for adapter in layer.lora_A:
                parts: tuple[Any, Any] = (layer.lora_A[adapter], layer.lora_B[adapter])  # nn.Linear each
                shards = {(part, name): p for part in parts for name, p in part.named_parameters(recurse=False)}
                with _whole(parts[0]), _whole(parts[1]):
                    for part in parts:
                        part.reset_parameters()
                    init = getattr(peft.peft_config[adapter], "init_lora_weights", True)  # a LoraConfig's
                    layer.reset_lora_parameters(adapter, init)
                    whole = {(part, name): getattr(part, name).detach() for part, name in shards}
                for key, shard in shards.items():
                    local, index = _local_part(shard)
                    local.copy_(whole[key][index])
