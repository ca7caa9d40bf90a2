"""Schema of training runs (conf/train.yaml) and its trainer, precision and sweep groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from omegaconf import MISSING, OmegaConf

from lab.config import callbacks as callback_options
from lab.config import options
from lab.config.checks import at_least, seed, wandb_tags
from lab.config.checks import one_of as _one_of
from lab.config.checks import require as _require
from lab.config.distributed import meta_init_refused
from lab.config.options import Option
from lab.config.trackers import LoggerConfig, logger_config


@dataclass
class TrainerConfig:
    max_epochs: int = 10
    max_steps: int = -1  # optimizer steps; -1 = limited by max_epochs only
    grad_accum_steps: int = 1
    grad_clip: float | None = 1.0  # max global grad norm; null = no clipping
    log_every_n_steps: int = 50
    val_every_n_epochs: int = 1
    ckpt_every_n_steps: int = 0  # 0 = only at epoch ends
    async_save: bool = False  # dist=fsdp: write shards in the background; training stalls only to copy them
    limit_train_batches: int = -1  # -1 = all; debug runs use a few
    limit_val_batches: int = -1
    overfit_batches: int = 0  # >0: train and validate on this many fixed batches (debug=overfit)
    device: str = "auto"  # auto | cpu | cuda | mps
    compile: bool = False
    channels_last: bool = False
    deterministic: bool = False
    cudnn_benchmark: bool = False
    tf32: bool = True
    max_bad_steps: int = 0  # >0: skip up to this many consecutive non-finite-loss steps (costs a sync per step)
    progress_bar: str = "auto"  # auto (only on a TTY) | on | off
    # Dense peak FLOP/s of one device for train/mfu (e.g. 989e12 for H100 bf16). null = lab.training.flops' table
    # of common GPUs, and no MFU on a CPU or an unlisted GPU.
    peak_flops: float | None = None
    # Fine-tuning: what model.freeze names trains from this 0-based epoch on. 2 = two epochs of the head alone,
    # then everything. null = frozen for the whole run.
    unfreeze_at_epoch: int | None = None

    def __post_init__(self) -> None:
        at_least("trainer.max_epochs", self.max_epochs, 1)
        at_least("trainer.unfreeze_at_epoch", self.unfreeze_at_epoch, 1, or_null=True)
        _require(
            self.max_steps == -1 or self.max_steps >= 1,
            f"trainer.max_steps must be -1 (no limit) or >= 1, got {self.max_steps}",
        )
        at_least("trainer.grad_accum_steps", self.grad_accum_steps, 1)
        at_least("trainer.grad_clip", self.grad_clip, 0, strict=True, or_null=True)
        at_least("trainer.log_every_n_steps", self.log_every_n_steps, 1)
        at_least("trainer.val_every_n_epochs", self.val_every_n_epochs, 1)
        at_least("trainer.ckpt_every_n_steps", self.ckpt_every_n_steps, 0)
        for key in ("limit_train_batches", "limit_val_batches"):
            value = getattr(self, key)
            _require(value == -1 or value >= 1, f"trainer.{key} must be -1 (all) or >= 1, got {value}")
        at_least("trainer.overfit_batches", self.overfit_batches, 0)
        at_least("trainer.max_bad_steps", self.max_bad_steps, 0)
        _one_of("trainer.device", self.device, ("auto", "cpu", "cuda", "mps"))
        _one_of("trainer.progress_bar", self.progress_bar, ("auto", "on", "off"))
        _require(
            self.peak_flops is None or self.peak_flops > 0,
            f"trainer.peak_flops must be > 0 (FLOP/s of one device) or null, got {self.peak_flops}",
        )


@dataclass
class PrecisionConfig(Option, group="precision"):
    """The `precision` group; lab.runtime.resolve_precision turns the chosen policy into autocast and GradScaler."""

    autocast: ClassVar[bool] = True  # computes under torch.autocast (all but fp32)
    name: str = MISSING  # set by the option; choose with precision=fp32|amp|bf16|fp16
    dtype: str | None = None  # autocast dtype: float16 | bfloat16; null = float16 on CUDA, bfloat16 elsewhere
    grad_scaler: bool = False  # loss scaling, which float16 gradients need (used only with float16)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dtype is not None:
            _one_of("precision.dtype", self.dtype, ("float16", "bfloat16"))


@dataclass
class Fp32Config(PrecisionConfig):
    """Full precision: no autocast, no loss scaling."""

    autocast: ClassVar[bool] = False


@dataclass
class AmpConfig(PrecisionConfig):
    """Mixed precision to suit the device: float16 + GradScaler on CUDA, bfloat16 elsewhere, where float16 is slow."""

    grad_scaler: bool = True


@dataclass
class Bf16Config(PrecisionConfig):
    """bfloat16 autocast: fp32's exponent range, so no loss scaling is needed."""

    dtype: str | None = "bfloat16"


@dataclass
class Fp16Config(PrecisionConfig):
    """float16 autocast, with the GradScaler on since gradients underflow without loss scaling."""

    dtype: str | None = "float16"
    grad_scaler: bool = True


@dataclass
class SweepConfig:
    fail_fast: bool = False  # true: launch no further jobs after one fails; false: run them all, exit non-zero
    # Direction of optimized_metric: it sorts the sweep summary and guides a search. Defaults to the task's mode.
    direction: str = "${lab.direction:${task.mode}}"

    def __post_init__(self) -> None:
        _one_of("sweep.direction", self.direction, ("maximize", "minimize"))


@dataclass
class PathsConfig:
    """Where this machine keeps data and outputs (relative: to the directory a script is run from). Set them per
    machine in conf/local/default.yaml (git-ignored, composed last), not in a diff."""

    data: str = "data"  # data.root's default: where datasets' files are, or are downloaded to
    outputs: str = "outputs"  # run dirs: <outputs>/<task_name>/<stamp>; sweeps: <outputs>/<task_name>/multirun/<stamp>


@dataclass
class TrainConfig:
    task_name: str = "train"
    seed: int = 42
    ckpt_path: str | None = None  # resume from this checkpoint, into this run's own new dir
    resume: str | None = None  # auto: continue the newest unfinished run of this config in its dir | <run dir>
    overwrite: bool = False  # true: start in a hydra.run.dir that holds another run's checkpoints, replacing them
    tags: list[str] = field(default_factory=list)
    # what train returns to sweepers: val/acc_best for classification, val/rmse_best for regression
    optimized_metric: str = "val/${task.monitor}_best"
    paths: PathsConfig = field(default_factory=PathsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    task: Any = MISSING  # typed by the chosen task's own schema (conf/task/*.yaml)
    data: Any = MISSING  # typed by the chosen dataset's own schema (conf/data/*.yaml)
    model: Any = MISSING  # typed by the chosen model's own schema (conf/model/*.yaml)
    optimizer: Any = MISSING  # typed by the chosen optimizer's schema (conf/optimizer/*.yaml)
    scheduler: Any = MISSING  # typed by the chosen schedule's schema (conf/scheduler/*.yaml)
    precision: Any = MISSING  # typed by the chosen option's schema (precision=fp32|amp|bf16|fp16)
    dist: Any = MISSING  # typed by the chosen strategy's schema (conf/dist/*.yaml)
    logger: LoggerConfig = field(default_factory=logger_config)  # + logger.<tracker> per tracker (trackers.py)
    # Trainer callbacks turned on (lab.config.callbacks); callback=<name> puts that option's node here.
    callbacks: dict[str, Any] = field(default_factory=dict)
    sweep: SweepConfig = field(default_factory=SweepConfig)

    def __post_init__(self) -> None:
        seed("seed", self.seed)
        wandb_tags("tags", self.tags)
        # An unknown callback or key, or an option that cannot work with the rest, refused before any work.
        chosen = (self.data, self.task, self.model, self.optimizer, self.scheduler, self.precision, self.dist)
        for option in (*callback_options.chosen(self.callbacks).values(), *chosen):
            why = option.conflict(self)
            _require(why is None, str(why))
        _require(
            self.resume is None or self.ckpt_path is None,
            "pass resume=... or ckpt_path=..., not both (resume continues a run in its own dir)",
        )
        _require(
            self.data.batch_mixing() is None or self.task.target_type == "class",
            "data.mixup_alpha/cutmix_alpha mix class labels into class probabilities, which only a classification task "
            f"trains on (task={self.task.name}); use task=classification, or set them to 0",
        )
        _require(
            self.trainer.unfreeze_at_epoch is None or bool(self.model.freeze),
            "trainer.unfreeze_at_epoch unfreezes what model.freeze names, and it names nothing; set "
            "model.freeze=[<backbone patterns>] (e.g. [conv1.*, layer*]) or drop trainer.unfreeze_at_epoch",
        )
        # Features that need the whole weights on every rank; only dist=fsdp shards them.
        fsdp = self.dist.shards_weights
        _require(
            not (self.trainer.unfreeze_at_epoch is not None and fsdp),
            "trainer.unfreeze_at_epoch does not work with dist=fsdp yet (its shards are made for the trainable "
            "parameters); use dist=ddp, or drop trainer.unfreeze_at_epoch",
        )
        # Refuse a model whose option knows it cannot be built on the meta device before any process starts. What
        # only its module tree tells is refused once the data gives its shapes (lab.distributed.meta_init).
        why = self.model.meta_init_blocker() if getattr(self.dist, "meta_init", None) is True else None
        _require(why is None, meta_init_refused(str(why)))
        _require(
            not (self.trainer.async_save and not fsdp),
            "trainer.async_save writes sharded checkpoints in the background, which only dist=fsdp makes; use "
            "dist=fsdp, or drop trainer.async_save",
        )


@dataclass
class TrainNodeConfig(Option, group="train_node", key=""):
    """A top-level node of the train config that an extension adds, named by its option (`<name>.<key>=...`). Every
    one is present with its defaults, as its settings say whether it is on; nobody chooses it by name."""

    @classmethod
    def stored_as(cls, name: str) -> None:
        return None

    def sweep_parts(self) -> tuple[str, int] | None:
        """Return `(key, n)` to run each sweep job as n jobs, one per `key=0..n-1` (the folds of a cross-validation),
        whose result is the mean of theirs; None runs it as one job (lab.sweeps.jobs.expand)."""
        return None

    def pool_splitter(self, run_dir: Any) -> Any:
        """Return what splits the data's train+val pool into this run's (train, val) indices instead of
        data.val_fraction, or None (lab.data.common.train_val_test). It may record the split in `run_dir`."""
        return None


def train_nodes(cfg: Any) -> list[TrainNodeConfig]:
    """Return the checked `train_node` options of a composed train config (a DictConfig)."""
    nodes = [OmegaConf.to_object(cfg[name]) for name in options.options("train_node") if name in cfg]
    return [node for node in nodes if isinstance(node, TrainNodeConfig)]


def train_schema() -> type[TrainConfig]:
    """Return TrainConfig with a top-level node per `train_node` option (an extension's own settings)."""
    return options.node_per_option(TrainConfig, "train_node", "train", "TrainNodesConfig")
