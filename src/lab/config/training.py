"""Schema of training runs (conf/train.yaml and its groups): trainer, data, model, optimizer, scheduler,
precision, dist, logger, sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require


# --------------------------------------------------------------------------- trainer
@dataclass
class TrainerConfig:
    max_epochs: int = 10
    max_steps: int = -1  # optimizer steps; -1 = limited by max_epochs only
    grad_accum_steps: int = 1
    grad_clip: float | None = 1.0  # max global grad norm; null = no clipping
    log_every_n_steps: int = 50
    val_every_n_epochs: int = 1
    ckpt_every_n_steps: int = 0  # 0 = only at epoch ends
    limit_train_batches: int = -1  # -1 = all; debug runs use a few
    limit_val_batches: int = -1
    overfit_batches: int = 0  # >0: train and validate on this many fixed batches (debug=overfit)
    device: str = "auto"  # auto | cpu | cuda | mps
    compile: bool = False
    channels_last: bool = False
    deterministic: bool = False
    cudnn_benchmark: bool = False
    tf32: bool = True
    detect_anomaly: bool = False
    progress_bar: str = "auto"  # auto (only on a TTY) | on | off

    def __post_init__(self) -> None:
        _require(self.max_epochs >= 1, f"trainer.max_epochs must be >= 1, got {self.max_epochs}")
        _require(
            self.max_steps == -1 or self.max_steps >= 1,
            f"trainer.max_steps must be -1 (no limit) or >= 1, got {self.max_steps}",
        )
        _require(self.grad_accum_steps >= 1, f"trainer.grad_accum_steps must be >= 1, got {self.grad_accum_steps}")
        _require(
            self.grad_clip is None or self.grad_clip > 0, f"trainer.grad_clip must be > 0 or null, got {self.grad_clip}"
        )
        _require(self.log_every_n_steps >= 1, f"trainer.log_every_n_steps must be >= 1, got {self.log_every_n_steps}")
        _require(
            self.val_every_n_epochs >= 1, f"trainer.val_every_n_epochs must be >= 1, got {self.val_every_n_epochs}"
        )
        _require(
            self.ckpt_every_n_steps >= 0, f"trainer.ckpt_every_n_steps must be >= 0, got {self.ckpt_every_n_steps}"
        )
        for key in ("limit_train_batches", "limit_val_batches"):
            value = getattr(self, key)
            _require(value == -1 or value >= 1, f"trainer.{key} must be -1 (all) or >= 1, got {value}")
        _require(self.overfit_batches >= 0, f"trainer.overfit_batches must be >= 0, got {self.overfit_batches}")
        _one_of("trainer.device", self.device, ("auto", "cpu", "cuda", "mps"))
        _one_of("trainer.progress_bar", self.progress_bar, ("auto", "on", "off"))


# --------------------------------------------------------------------------- data
@dataclass
class LoaderConfig:
    """Keys every dataset has: where its files are, how it is split and batched. A dataset's own schema extends
    this one (a fork's new dataset too: its module registers the schema with its builder)."""

    name: str = MISSING
    root: str = "data"
    batch_size: int = 64  # per device
    eval_batch_size: int | None = None  # null = batch_size
    num_workers: int = 0
    pin_memory: bool | None = None  # null = auto: only when training on CUDA
    persistent_workers: bool = True  # only meaningful with num_workers > 0
    split_seed: int = 0  # fixes the train/val(/test) split, independent of the training seed
    val_fraction: float = 0.15
    test_fraction: float = 0.15  # only for datasets without an official test split

    def __post_init__(self) -> None:
        _require(self.batch_size >= 1, f"data.batch_size must be >= 1, got {self.batch_size}")
        _require(
            self.eval_batch_size is None or self.eval_batch_size >= 1,
            f"data.eval_batch_size must be >= 1 or null, got {self.eval_batch_size}",
        )
        _require(self.num_workers >= 0, f"data.num_workers must be >= 0, got {self.num_workers}")
        _require(0 < self.val_fraction < 1, f"data.val_fraction must be in (0, 1), got {self.val_fraction}")
        _require(
            0 <= self.test_fraction < 1 and self.val_fraction + self.test_fraction < 1,
            "data.test_fraction must be in [0, 1) and val_fraction + test_fraction < 1",
        )


@dataclass
class DataConfig(LoaderConfig):
    """Image classification datasets: digits | mnist | fashion_mnist | cifar10 | image_folder | synthetic."""

    name: str = "digits"
    download: bool = False
    num_classes: int | None = None  # null = what the dataset says
    in_channels: int = 1
    image_size: int = 8
    augment: bool = False
    mean: list[float] | None = None  # null = the dataset's own statistics
    std: list[float] | None = None
    num_samples: int = 2048  # synthetic only

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            self.num_classes is None or self.num_classes >= 2,
            f"data.num_classes must be >= 2 or null, got {self.num_classes}",
        )
        _require(self.in_channels >= 1, f"data.in_channels must be >= 1, got {self.in_channels}")
        _require(self.image_size >= 1, f"data.image_size must be >= 1, got {self.image_size}")
        _require((self.mean is None) == (self.std is None), "set both data.mean and data.std, or neither")
        if self.std is not None:
            _require(all(s > 0 for s in self.std), f"data.std values must be > 0, got {self.std}")
        _require(self.num_samples >= 1, f"data.num_samples must be >= 1, got {self.num_samples}")


@dataclass
class DiabetesConfig(LoaderConfig):
    """scikit-learn's bundled diabetes table: 442 patients, 10 features, disease progression after a year."""

    name: str = "diabetes"


@dataclass
class CsvConfig(LoaderConfig):
    """A user's own table: one row per sample, numeric feature columns, one target column."""

    name: str = "csv"
    path: str = MISSING  # the .csv file (header row required)
    target: str = MISSING  # the target column's name
    features: list[str] | None = None  # null = every other column
    target_type: str = "${task.target_type}"  # class (labels) | value (regression); follows the task

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("data.target_type", self.target_type, ("class", "value"))


@dataclass
class TextConfig(LoaderConfig):
    """A text corpus for character/byte-level language modelling, cut into windows of block_size tokens."""

    name: str = "text"
    path: str | None = None  # a text file; null = Python's own standard-library sources (always there offline)
    level: str = "char"  # char (vocabulary of the corpus' characters) | byte (256 symbols, any text)
    block_size: int = 64  # tokens per training window (the model's context)
    max_chars: int = 1_000_000  # cap on the corpus read (null-path corpus included)

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("data.level", self.level, ("char", "byte"))
        _require(self.block_size >= 2, f"data.block_size must be >= 2, got {self.block_size}")
        _require(self.max_chars >= 1, f"data.max_chars must be >= 1, got {self.max_chars}")


# --------------------------------------------------------------------------- tasks
@dataclass
class TaskConfig:
    """What is learned. `monitor` (a validation metric without "val/") and `mode` drive best.pt, the plateau
    scheduler and sweeps; `target_type` tells table datasets how to read their target column."""

    name: str = MISSING
    monitor: str = MISSING
    mode: str = MISSING  # max | min
    target_type: str = MISSING  # class | value | tokens

    def __post_init__(self) -> None:
        _one_of("task.mode", self.mode, ("max", "min"))


@dataclass
class ClassificationTaskConfig(TaskConfig):
    name: str = "classification"
    monitor: str = "acc"
    mode: str = "max"
    target_type: str = "class"
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0 <= self.label_smoothing < 1, f"task.label_smoothing must be in [0, 1), got {self.label_smoothing}")


@dataclass
class RegressionTaskConfig(TaskConfig):
    name: str = "regression"
    monitor: str = "rmse"
    mode: str = "min"
    target_type: str = "value"


@dataclass
class LanguageModelTaskConfig(TaskConfig):
    name: str = "language_model"
    monitor: str = "loss"
    mode: str = "min"
    target_type: str = "tokens"
    samples: int = 3  # eval: generations written to samples.txt
    sample_tokens: int = 120  # eval: length of each generation

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.samples >= 0 and self.sample_tokens >= 1, "task.samples must be >= 0, sample_tokens >= 1")


# --------------------------------------------------------------------------- models
@dataclass
class ModelConfig:
    name: str = MISSING


@dataclass
class MLPConfig(ModelConfig):
    name: str = "mlp"
    hidden_dims: list[int] = field(default_factory=lambda: [256, 128])
    dropout: float = 0.1

    def __post_init__(self) -> None:
        _require(all(h >= 1 for h in self.hidden_dims), f"model.hidden_dims must be >= 1, got {self.hidden_dims}")
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class CNNConfig(ModelConfig):
    name: str = "cnn"
    channels: list[int] = field(default_factory=lambda: [32, 64, 128])
    dropout: float = 0.1
    grad_checkpointing: bool = False  # recompute block activations in backward: less memory, ~30% more compute

    def __post_init__(self) -> None:
        _require(
            len(self.channels) >= 1 and all(c >= 1 for c in self.channels),
            f"model.channels must be a non-empty list of positive ints, got {self.channels}",
        )
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


@dataclass
class TorchvisionConfig(ModelConfig):
    name: str = "torchvision"
    arch: str = "resnet18"  # any name from torchvision.models.list_models(torchvision.models)
    small_input: bool = False  # resnets: 3x3 stride-1 stem without max-pool, for 8-32 px images


@dataclass
class GPTConfig(ModelConfig):
    """A small decoder-only transformer (causal scaled_dot_product_attention, tied embeddings)."""

    name: str = "gpt"
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1
    grad_checkpointing: bool = False  # recompute each block in backward: less activation memory

    def __post_init__(self) -> None:
        _require(self.n_layer >= 1 and self.n_head >= 1, "model.n_layer and model.n_head must be >= 1")
        _require(
            self.n_embd % self.n_head == 0, f"model.n_embd={self.n_embd} must be a multiple of n_head={self.n_head}"
        )
        _require(0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")


# --------------------------------------------------------------------------- optimizer / scheduler
@dataclass
class OptimizerConfig:
    _target_: str = MISSING
    _partial_: bool = True  # lab.optim calls it with the parameter groups
    lr: float = 1e-3
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _require(self.lr > 0, f"optimizer.lr must be > 0, got {self.lr}")
        _require(self.weight_decay >= 0, f"optimizer.weight_decay must be >= 0, got {self.weight_decay}")


@dataclass
class AdamWConfig(OptimizerConfig):
    _target_: str = "torch.optim.AdamW"
    lr: float = 3e-3
    weight_decay: float = 0.05
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    fused: bool | None = None  # null: torch's fused kernel on CUDA (no host sync with a GradScaler), default elsewhere


@dataclass
class SGDConfig(OptimizerConfig):
    _target_: str = "torch.optim.SGD"
    lr: float = 0.1
    weight_decay: float = 5e-4
    momentum: float = 0.9
    nesterov: bool = True
    fused: bool | None = None  # null: torch's fused kernel on CUDA, default elsewhere

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.momentum >= 0, f"optimizer.momentum must be >= 0, got {self.momentum}")
        _require(not self.nesterov or self.momentum > 0, "optimizer.nesterov=true needs optimizer.momentum > 0")


@dataclass
class SchedulerConfig:
    name: str = "cosine"  # cosine | step | onecycle | plateau | constant
    warmup_steps: int = 0  # linear warmup, in optimizer steps
    min_lr_ratio: float = 0.0  # cosine: final lr = lr * min_lr_ratio
    step_size: int = 1000  # step: decay every step_size optimizer steps
    gamma: float = 0.1  # step: decay factor
    factor: float = 0.5  # plateau: decay factor
    patience: int = 2  # plateau: validations without improvement before decaying
    monitor: str = "val/${task.monitor}"  # plateau: metric it watches (default: the task's monitor)
    mode: str = "${task.mode}"

    def __post_init__(self) -> None:
        _one_of("scheduler.name", self.name, ("cosine", "step", "onecycle", "plateau", "constant"))
        _require(self.warmup_steps >= 0, f"scheduler.warmup_steps must be >= 0, got {self.warmup_steps}")
        _require(0 <= self.min_lr_ratio <= 1, f"scheduler.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        _require(self.step_size >= 1, f"scheduler.step_size must be >= 1, got {self.step_size}")
        _require(0 < self.gamma <= 1 and 0 < self.factor < 1, "scheduler.gamma must be in (0, 1], factor in (0, 1)")
        _one_of("scheduler.mode", self.mode, ("min", "max"))


# --------------------------------------------------------------------------- precision / dist
@dataclass
class PrecisionConfig:
    name: str = "fp32"  # fp32 | amp | bf16 | fp16
    dtype: str | None = None  # autocast dtype: float16 | bfloat16; null = full precision
    grad_scaler: bool = False  # loss scaling, needed for float16 gradients

    def __post_init__(self) -> None:
        _one_of("precision.name", self.name, ("fp32", "amp", "bf16", "fp16"))
        if self.dtype is not None:
            _one_of("precision.dtype", self.dtype, ("float16", "bfloat16"))


@dataclass
class DistConfig:
    strategy: str = "none"  # none | ddp | fsdp
    nproc: Any = "auto"  # processes on this node: auto = one per GPU, 2 on a CPU-only machine
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | nccl | gloo
    sync_bn: bool = False  # SyncBatchNorm: batch statistics over all ranks (small per-GPU batches)
    find_unused_parameters: bool = False  # DDP: only for models whose forward skips parameters
    lr_scaling: str = "none"  # none | linear | sqrt: lr *= (effective batch / base_batch_size)^(1 or 1/2)
    base_batch_size: int | None = None  # the effective batch optimizer.lr was tuned for; null = data.batch_size
    reshard_after_forward: bool = True  # FSDP2: free gathered parameters after forward (less memory)
    master_port: int | None = None  # spawned jobs: rendezvous port; null = a free one
    timeout_s: float = 600.0  # collective timeout: a stuck rank fails the job instead of hanging it

    def __post_init__(self) -> None:
        _one_of("dist.strategy", self.strategy, ("none", "ddp", "fsdp"))
        _require(
            self.nproc == "auto" or (isinstance(self.nproc, int) and self.nproc >= 1),
            f"dist.nproc must be auto or an int >= 1, got {self.nproc!r}",
        )
        _one_of("dist.backend", self.backend, ("auto", "nccl", "gloo"))
        _one_of("dist.lr_scaling", self.lr_scaling, ("none", "linear", "sqrt"))
        _require(
            self.base_batch_size is None or self.base_batch_size >= 1,
            f"dist.base_batch_size must be >= 1 or null, got {self.base_batch_size}",
        )
        _require(self.timeout_s > 0, f"dist.timeout_s must be > 0, got {self.timeout_s}")


# --------------------------------------------------------------------------- logger
@dataclass
class LoggerConfig:
    name: str = "wandb"  # wandb | none (the local metrics.jsonl / summary.json mirror is written either way)
    mode: str = "auto"  # auto: online when credentials exist (WANDB_API_KEY or netrc), else offline | WANDB_MODE
    project: str | None = None  # null: $WANDB_PROJECT, else "lab"
    entity: str | None = None  # null: $WANDB_ENTITY or your default entity
    group: str | None = None  # null: the sweep's name for multirun jobs
    tags: list[str] = field(default_factory=list)  # added to the top-level `tags`
    init_timeout: float = 30.0  # seconds to reach the server before falling back to offline
    log_checkpoints: str = "none"  # none | best | last: upload that checkpoint as a model artifact at the end

    def __post_init__(self) -> None:
        _one_of("logger.name", self.name, ("wandb", "none"))
        _one_of("logger.mode", self.mode, ("auto", "online", "offline", "disabled"))
        _one_of("logger.log_checkpoints", self.log_checkpoints, ("none", "best", "last"))
        _require(self.init_timeout > 0, f"logger.init_timeout must be > 0, got {self.init_timeout}")


# --------------------------------------------------------------------------- sweeps (Hydra multirun)
@dataclass
class SweepConfig:
    fail_fast: bool = False  # true: launch no further jobs after one fails; false: run them all, exit non-zero
    # of optimized_metric: sorts the sweep summary; hparams_search=optuna follows it. Default: the task's mode
    direction: str = "${lab.direction:${task.mode}}"

    def __post_init__(self) -> None:
        _one_of("sweep.direction", self.direction, ("maximize", "minimize"))


# --------------------------------------------------------------------------- top level
@dataclass
class TrainConfig:
    task_name: str = "train"
    seed: int = 42
    ckpt_path: str | None = None  # resume from this checkpoint
    tags: list[str] = field(default_factory=list)
    optimized_metric: str = "val/${task.monitor}_best"  # what train returns to sweepers
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    task: Any = MISSING  # typed by the chosen task's own schema (conf/task/*.yaml)
    data: Any = MISSING  # typed by the chosen dataset's own schema (conf/data/*.yaml)
    model: Any = MISSING  # typed by the chosen model's own schema (conf/model/*.yaml)
    optimizer: Any = MISSING
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    # name -> {_target_: ..., ...}: objects with on_validation_end(trainer, metrics, epoch) / on_fit_end(trainer,
    # summary) hooks, instantiated per run (e.g. the Optuna pruning callback a sweep adds)
    callbacks: dict[str, Any] = field(default_factory=dict)
    sweep: SweepConfig = field(default_factory=SweepConfig)

    def __post_init__(self) -> None:
        _require(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
