"""Benchmark the template's training loop against transformers' `Trainer`, and LoRA against full fine-tuning.

    python -m lab.extensions.hf.bench_hf_finetune [--steps 30] [--batch 8] [--length 64] [--hidden 64] [--layers 2]
        [--lora-r 8] [--threads 1]

It writes a Llama-like causal LM of --hidden width and --layers blocks (random weights: nothing downloads) and
random token sequences, then trains in this process, on the same model, data, batch, learning rate and AdamW:
  1. the template (`lab.workflows.train.run` with model=hf, task=language_model), the whole model;
  2. transformers' `Trainer`, the whole model;
  3. the template with model.lora.r=--lora-r.
Each reports tokens per second over its optimizer steps after the first (a callback stamps each step's end, so
start-up, validation and checkpoint writes are not counted) and how many parameters train. It prints the template /
Trainer throughput ratio and LoRA's trainable parameters and step time against full fine-tuning. Torch runs one
thread by default (--threads 0 keeps torch's default): on a shared 2-core machine two threads make steps erratic.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir

from lab.config import CallbackConfig, DataConfig, validate
from lab.training.callbacks import Callback
from lab.workflows.train import run

CONF = Path(__file__).resolve().parents[4] / "conf"
STAMPS: list[float] = []  # perf_counter() at the end of each optimizer step of the run in progress


class StepClock(Callback):
    def on_train_step_end(self, trainer: Any) -> None:
        STAMPS.append(time.perf_counter())


@dataclass
class BenchStepClockConfig(CallbackConfig):
    def build(self, trainer: Any) -> StepClock:
        return StepClock()


@dataclass
class BenchRandomTokensConfig(DataConfig):
    """Random token sequences: inputs and their next tokens, the core language-model batches."""

    vocab: int = 512
    length: int = 64
    num_samples: int = 256

    def build(self) -> Any:
        from lab.data.common import DataModule

        ids = torch.randint(
            0, self.vocab, (self.num_samples, self.length + 1), generator=torch.Generator().manual_seed(0)
        )
        samples = [(row[:-1], row[1:]) for row in ids]
        meta = {
            "input_shape": [self.length],
            "num_outputs": self.vocab,
            "vocab_size": self.vocab,
            "block_size": self.length,
        }
        return DataModule(samples, samples[:16], None, meta)


def write_model(folder: Path, args: argparse.Namespace) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 32),
        max_position_embeddings=args.length + 1,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def tokens_per_second(stamps: list[float], tokens_per_step: int) -> tuple[float, float]:
    """Return (tokens/s, median s/step) over the steps after the first, which pays for warm-up."""
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return tokens_per_step * len(gaps) / sum(gaps), statistics.median(gaps)


def template(model_dir: Path, run_dir: Path, args: argparse.Namespace, lora: int | None) -> dict[str, float]:
    STAMPS.clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                *("logger=none", "trainer.progress_bar=off", "task=language_model", "task.samples=0"),
                *("model=hf", f"model.name_or_path={model_dir}", f"model.lora.r={'null' if lora is None else lora}"),
                *("data=bench_random_tokens", f"data.vocab={args.vocab}", f"data.length={args.length}"),
                *(f"data.batch_size={args.batch}", f"data.num_samples={args.batch * args.steps}", "data.num_workers=0"),
                *("optimizer=adamw", f"optimizer.lr={args.lr}", "optimizer.weight_decay=0", "scheduler=constant"),
                *("trainer.max_epochs=1", "trainer.limit_val_batches=1", "+callbacks.bench_step_clock={}"),
            ],
        )
    validate(cfg)
    run(cfg, run_dir)
    speed, step = tokens_per_second(STAMPS, args.batch * args.length)
    return {"tokens_per_s": speed, "s_per_step": step}


def hf_trainer(model_dir: Path, out: Path, args: argparse.Namespace) -> dict[str, float]:
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            stamps.append(time.perf_counter())

    ids = torch.randint(
        0, args.vocab, (args.batch * args.steps, args.length), generator=torch.Generator().manual_seed(0)
    )
    rows = [{"input_ids": row, "labels": row} for row in ids]  # the model shifts the labels itself
    settings = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=args.batch, max_steps=args.steps, learning_rate=args.lr,
        weight_decay=0.0, lr_scheduler_type="constant", save_strategy="no", report_to=[], use_cpu=True,
        dataloader_num_workers=0, logging_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    Trainer(model=model, args=settings, train_dataset=rows, callbacks=[Clock()]).train()
    speed, step = tokens_per_second(stamps, args.batch * args.length)
    return {"tokens_per_s": speed, "s_per_step": step}


def trainable(model_dir: Path, vocab: int, lora: int | None) -> int:
    from lab.extensions.hf.options import HfModelConfig, LoraSettings
    from lab.models.common import build as build_model

    option = HfModelConfig(name_or_path=str(model_dir), lora=LoraSettings(r=lora))
    model = build_model(option, {"vocab_size": vocab, "block_size": 1, "input_shape": [1], "num_outputs": vocab})
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, default in (("steps", 30), ("batch", 8), ("length", 64), ("hidden", 64), ("layers", 2), ("vocab", 512)):
        parser.add_argument(f"--{flag}", type=int, default=default)
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = write_model(root / "model", args)
        rows = {
            "template, full": template(model_dir, root / "full", args, None),
            "transformers Trainer, full": hf_trainer(model_dir, root / "trainer", args),
            f"template, LoRA r={args.lora_r}": template(model_dir, root / "lora", args, args.lora_r),
        }
        counts = {"full": trainable(model_dir, args.vocab, None), "lora": trainable(model_dir, args.vocab, args.lora_r)}
    print("| run | tokens/s | s/step |\n|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['tokens_per_s']:,.0f} | {row['s_per_step']:.4f} |")
    full, trainer, lora = rows.values()
    print(f"template / Trainer: {full['tokens_per_s'] / trainer['tokens_per_s']:.2f}x the tokens/s")
    print(
        f"LoRA r={args.lora_r}: {counts['lora']:,} of {counts['full']:,} parameters train "
        f"({100 * counts['lora'] / counts['full']:.2f}%), {lora['s_per_step'] / full['s_per_step']:.2f}x the step time"
    )


if __name__ == "__main__":
    main()
