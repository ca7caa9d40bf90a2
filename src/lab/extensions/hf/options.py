"""The `hf` extension's options: `model=hf` (any transformers model for sequence classification or causal language
modelling), `data=hf` (tables and text through Hugging Face `datasets`) and the eval step `eval.lm_eval` (lm-eval's
tasks on a causal LM checkpoint).

This module is imported at every start, so it imports neither torch, datasets, transformers nor lm_eval: ``build``
imports ``models`` (the model), ``data`` (tables) or ``text`` (text), and the eval step ``harness``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import MISSING

from lab import extras
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.data import DataConfig
from lab.config.models import ModelConfig
from lab.config.tools import EvalStepConfig, ExportOptions, ExportStepConfig

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lab.data.common import DataModule
    from lab.data.text import TextCodec
    from lab.extensions.hf.models import HfModel

KINDS = ("auto", "sequence_classification", "causal_lm")
DTYPES = ("float32", "bfloat16")


@dataclass
class LoraSettings:
    """`model.lora`: a PEFT LoRA adapter; r=null (or model.lora=null) trains the whole model instead."""

    r: int | None = None  # the adapter's rank
    alpha: int = 16  # the update is scaled by alpha / r
    dropout: float = 0.0  # dropout on the adapter's input
    # module names the adapter wraps; null = PEFT's default for the architecture, its attention projections
    # (query/value for BERT, q_proj/v_proj for Llama)
    target_modules: list[str] | None = None


@dataclass
class HfModelConfig(ModelConfig, name="hf"):
    """A transformers model by hub id or local directory (model.name_or_path), with its pretrained weights.

    Sequence classification gets a new head sized from the data's classes; a causal LM predicts the next token. The
    files are read offline first: a local directory, the Hugging Face cache ($HF_HOME), then the hub when reachable."""

    requires = ("transformers", "peft")

    name_or_path: str = MISSING
    revision: str | None = None  # a branch, tag or commit of a hub id
    kind: str = "auto"  # auto (from the data: classes -> sequence_classification, else causal_lm) or either
    pretrained: bool = True  # false: the architecture from its config.json, randomly initialised
    dtype: str = "float32"  # the weights' dtype: float32 or bfloat16
    attn_implementation: str | None = None  # eager, sdpa, flash_attention_2...; null = transformers' choice
    grad_checkpointing: bool = False  # recompute each block in backward (the model's activation_checkpointing_enable)
    lora: LoraSettings | None = field(default_factory=LoraSettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("model.kind", self.kind, KINDS)
        _one_of("model.dtype", self.dtype, DTYPES)
        if self.lora is not None and self.lora.r is not None:
            _require(self.lora.r >= 1, f"model.lora.r must be >= 1 (or null: no LoRA), got {self.lora.r}")
            _require(0 <= self.lora.dropout < 1, f"model.lora.dropout must be in [0, 1), got {self.lora.dropout}")

    def save_with_run(self, run_dir: Path, meta: dict[str, Any]) -> None:
        # Model hooks, not data ones: eval, export and infer read the tokenizer through the model, whichever data
        # option tokenized (its data_meta names the tokenizer; no name, no text tokenized: nothing to save or read).
        from lab.extensions.hf.hub import save_run_tokenizer

        save_run_tokenizer(meta, run_dir)

    def read_with_run(self, checkpoint: Path, config: dict[str, Any], meta: dict[str, Any]) -> None:
        from lab.extensions.hf.hub import read_run_tokenizer

        read_run_tokenizer(checkpoint, config, meta)

    def conflict(self, run: Any) -> str | None:
        if self.dtype == "bfloat16" and run.precision.dtype == "float16":
            # autocast would cast bfloat16 weights to float16, whose range is far smaller: two 16-bit formats at once,
            # where the loss scaler protects only float16 gradients of float32 weights
            return (
                f"model.dtype=bfloat16 cannot train with precision={run.precision.name} (float16 autocast and its "
                "loss scaler): use precision=bf16, or model.dtype=float32"
            )
        return None

    @property
    def uses_lora(self) -> bool:
        return self.lora is not None and self.lora.r is not None

    # dist=fsdp: built on the meta device, each rank reads only its shards of the safetensors files (sharded_load.py)
    def meta_init_blocker(self) -> str | None:
        from lab.extensions.hf.sharded_load import unreadable

        return super().meta_init_blocker() if self.init_from is not None else unreadable(self)

    def meta_model_blocker(self, model: nn.Module) -> str | None:
        from lab.extensions.hf.sharded_load import blocker

        return blocker(self, model)

    def materialise(self, model: nn.Module, device: torch.device, rng_state: torch.Tensor) -> None:
        from lab.extensions.hf.sharded_load import materialise

        materialise(self, model, device, rng_state)

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from lab.extensions.hf.models import build_hf

        return build_hf(self, meta)

    def locate_weights(self) -> None:
        super().locate_weights()
        from lab.extensions.hf.hub import locate

        locate(self.name_or_path, self.revision)

    def for_checkpoint(self) -> ModelConfig:
        # A LoRA checkpoint holds the adapter, whose base is read again; any other holds every weight, so eval,
        # export and infer build the architecture from its config alone.
        return dataclasses.replace(self, init_from=None, pretrained=self.pretrained and self.uses_lora)

    def checkpoint_state(self, model: nn.Module, state: dict[str, Any]) -> dict[str, Any]:
        from lab.extensions.hf.models import checkpoint_state

        return checkpoint_state(cast("HfModel", model), state)

    def restore_state(self, model: nn.Module, ckpt: dict[str, Any], key: str = "model") -> dict[str, Any]:
        from lab.extensions.hf.models import restore_state

        return restore_state(cast("HfModel", model), ckpt, key)

    def input_readers(self, meta: dict[str, Any]) -> dict[str, Any]:
        if "num_classes" not in meta:
            return {}  # a causal LM continues prompt=
        from lab.extensions.hf.infer import SUFFIXES, text_reader

        read = text_reader(meta.get("tokenizer") or self.name_or_path, self.revision)
        return dict.fromkeys(SUFFIXES, read)

    def head(self, model: nn.Module) -> nn.Module | None:
        from lab.extensions.hf.models import head

        return head(model) or super().head(model)

    def layer_groups(self, model: nn.Module) -> list[list[str]] | None:
        from lab.extensions.hf.models import layer_groups

        return layer_groups(model)

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        from lab.extensions.hf.models import blocks

        return blocks(model)


LOCAL_FORMATS = ("csv", "json", "parquet")  # datasets' own loaders for data.data_files


@dataclass
class HfDataConfig(DataConfig, name="hf"):
    """A table or a text dataset read through Hugging Face `datasets` (data.py, text.py).

    Where the rows are, one of: data.path, a folder written by `Dataset.save_to_disk` (a Dataset, or a DatasetDict
    with train and optional validation|val and test splits), or one that `scripts/prepare_data.py data=hf
    data.source=big.csv data.path=<folder>` made from a CSV; data.dataset, a hub dataset by name (data.subset, its
    config), read from the HF_DATASETS_CACHE first; data.data_files, local csv/json/parquet files.

    Without a text key, rows become what data=csv makes: standardised numeric inputs, and a class label or a value
    as target (task.target_type). With data.text_column (or data.prompt_column + data.response_column, or
    data.messages_column) the text is tokenized by data.tokenizer: classification batches padded per batch, or, for
    task=language_model, blocks of data.block_size tokens (prompt tokens excluded from the loss)."""

    requires = ("datasets", "pyarrow")
    example_overrides = ("data.path=/path/to/arrow",)  # or data.dataset, or data.data_files: one of the three

    path: str | None = None  # the save_to_disk folder or the prepared folder
    dataset: str | None = None  # a hub dataset id (load_dataset's path), e.g. stanfordnlp/imdb
    subset: str | None = None  # the hub dataset's config name
    revision: str | None = None  # the hub dataset's revision
    # local csv/json/parquet files for datasets' own loaders: a path or glob, a list, or {split: path}
    data_files: Any = None
    # our split -> the dataset's split or slice, e.g. {val: test, test: "train[:10%]"}; null = train,
    # validation|val and test as found
    split_map: dict[str, str] | None = None
    target: str | None = None  # tables: the target column; needed to train, not to prepare
    # tables: the feature columns; null = every numeric column but the target and ClassLabel categories
    inputs: list[str] | None = None
    target_type: str = "${task.target_type}"  # class | value | tokens; follows the task
    # tables: the CSV to prepare from; if set at training, a folder prepared before it changed is refused
    source: str | None = None
    rows_per_part: int = 1_000_000  # rows per Arrow file; an interrupted prepare resumes at a file boundary
    text_column: str | None = None  # text: the column to tokenize
    label_column: str = "label"  # text classification: the class column
    prompt_column: str | None = None  # instruction tuning: the prompt, left out of the loss
    response_column: str | None = None  # instruction tuning: the response the loss is on
    messages_column: str | None = None  # chat: a list of {role, content} rendered by the tokenizer's chat template
    tokenizer: str | None = "${oc.select:model.name_or_path,null}"  # a hub id or a local folder
    pad_token: str | None = None  # null = the tokenizer's; eos = use its end-of-sequence token for padding
    max_length: int = 512  # text classification and prompt/response pairs: tokens kept per example
    block_size: int = 128  # task=language_model on data.text_column: tokens per packed training block
    streaming: bool = False  # text: read the rows as training goes (datasets' IterableDataset), resumable mid-epoch
    examples_per_epoch: int | None = None  # streaming: training items (rows, or packed blocks) per epoch, all ranks
    eval_examples: int = 1000  # streaming: the first rows of val and test (or of train, when no val) held in memory
    shuffle_buffer: int = 1000  # streaming: rows shuffled together (IterableDataset.shuffle's buffer_size)
    stream_shards: int = 1  # streaming: parts of the stream per rank; = data.num_workers: each worker reads one
    cache_dir: str | None = None  # null = HF_DATASETS_CACHE (hub datasets, local files, tokenized splits)

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("data.target_type", self.target_type, ("class", "value", "tokens"))
        _require(self.rows_per_part >= 1, f"data.rows_per_part must be >= 1, got {self.rows_per_part}")
        _require(
            self.loader == "torch",
            "data=hf reads a memory-mapped table batch by batch; data.loader=device would hold all of it in device "
            "memory: use data.loader=torch (or data=csv for a table that fits in memory)",
        )
        _require(self.inputs is None or len(self.inputs) > 0, "data.inputs=[] names no column; list some, or null")
        where = [key for key in ("path", "dataset", "data_files") if getattr(self, key) is not None]
        _require(
            len(where) == 1,
            "data=hf reads one of data.path (a save_to_disk or prepared folder), data.dataset (a hub dataset) or "
            f"data.data_files (local {'/'.join(LOCAL_FORMATS)} files); got "
            + (" and ".join(f"data.{k}" for k in where) or "none"),
        )
        _require(self.pad_token in (None, "eos"), f"data.pad_token must be null or eos, got {self.pad_token}")
        _require(
            (self.prompt_column is None) == (self.response_column is None),
            "data.prompt_column and data.response_column go together: set both (or data.messages_column)",
        )
        _require(self.max_length >= 2, f"data.max_length must be >= 2, got {self.max_length}")
        _require(self.block_size >= 2, f"data.block_size must be >= 2, got {self.block_size}")
        for key in ("eval_examples", "shuffle_buffer", "stream_shards"):
            _require(getattr(self, key) >= 1, f"data.{key} must be >= 1, got {getattr(self, key)}")
        _require(
            not self.streaming or self.is_text,
            "data.streaming=true reads text (data.text_column, data.prompt_column or data.messages_column); a table "
            "is read memory-mapped already",
        )

    @property
    def is_text(self) -> bool:
        return any(c is not None for c in (self.text_column, self.prompt_column, self.messages_column))

    def build(self) -> DataModule:
        if self.is_text:
            from lab.extensions.hf import streaming, text

            return (streaming if self.streaming else text).build(self)
        from lab.extensions.hf import data

        return data.build(self)

    def text_codec(self, meta: dict[str, Any]) -> TextCodec | None:
        if "tokenizer" not in meta:  # a table
            return None
        from lab.extensions.hf.text import TokenizerCodec

        return TokenizerCodec(meta["tokenizer"])

    def prepare(self) -> None:
        from lab.extensions.hf import data

        data.prepare(self)

    def verify(self) -> None:
        from lab.data import prepared
        from lab.extensions.hf import data

        prepared.verify(self.path, data.read_manifest(self))  # type: ignore[arg-type]


@dataclass
class HfExportConfig(ExportStepConfig, name="hf"):
    """`export.formats=[hf]`: a directory transformers' `from_pretrained` loads, with the tokenizer (export.py)."""

    formats = ("hf",)
    merge_lora: bool = True  # false: the LoRA adapter alone, for peft's AutoPeftModelFor...from_pretrained
    new_tokens: int = 8  # a causal LM's greedy tokens that the loaded directory must generate as the checkpoint does

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.new_tokens >= 1, f"export.hf.new_tokens must be >= 1, got {self.new_tokens}")

    def conflict(self, export: ExportOptions) -> str | None:
        if not self.merge_lora and "hf" not in export.formats:
            return "export.hf.merge_lora=false sets how export.formats=[hf] writes LoRA: add export.formats=[hf]"
        return None

    def refuse_checkpoint(self, fmt: str, restored: Any) -> str | None:
        from lab.extensions.hf.export import refusal

        return refusal(restored, self.merge_lora)

    def write_format(self, fmt: str, restored: Any, val_loader: Any, folder: Path, tolerance: float) -> dict[str, Any]:
        from lab.extensions.hf.export import write

        return write(restored, val_loader, folder, self.merge_lora, tolerance, self.new_tokens)

    def run(self, export: Any) -> None:
        """Nothing to add to the core's formats: hf is a format of its own, written by `write_format`."""


@dataclass
class LmEvalConfig(EvalStepConfig):
    """`eval.lm_eval`: EleutherAI's lm-evaluation-harness on a model=hf causal LM checkpoint (harness.py), after eval
    scores its split. Off until `eval.lm_eval.tasks` names some; results go to lm_eval.json and the trackers."""

    tasks: list[str] = field(default_factory=list)  # lm-eval task names (yours from include_path, or its own)
    num_fewshot: int | None = None  # examples shown before each question; null = each task's own setting
    limit: float | None = None  # examples scored per task (a fraction of it when < 1); null = all
    include_path: str | None = None  # a folder of your task YAMLs (lm-eval's TaskManager include_path)
    batch_size: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tasks:
            extras.require("eval.lm_eval.tasks", ("lm-eval",))
        _require(self.num_fewshot is None or self.num_fewshot >= 0, "eval.lm_eval.num_fewshot must be >= 0 or null")
        _require(self.limit is None or self.limit > 0, f"eval.lm_eval.limit must be > 0 or null, got {self.limit}")
        _require(self.batch_size >= 1, f"eval.lm_eval.batch_size must be >= 1, got {self.batch_size}")

    def refuse(self, restored: Any) -> str | None:
        if not self.tasks:
            return None
        from lab.extensions.hf import harness

        return harness.refuse(self, restored)

    def run(self, evaluation: Any) -> None:
        if self.tasks:
            from lab.extensions.hf import harness

            harness.run(self, evaluation)
