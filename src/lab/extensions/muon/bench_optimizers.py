"""Race AdamW + cosine against Muon + WSD on the character GPT (experiment=char_lm) to a fixed validation loss.

It prints the optimizer steps and training time of each, side by side, and their ratios.

    python -m lab.extensions.muon.bench_optimizers [--target 2.5] [--max-steps 300] [--eval-every 20] [overrides]

Both start from the same weights and see the same batches in the same order. Each schedule is planned over
--max-steps, with the experiment's 50 warmup steps. The validation loss is the mean over the first --eval-batches
validation batches, measured every --eval-every steps and printed to stderr; its time is not counted. The default
is tiny (a 2-layer, 64-wide GPT; batches of 16 x 32 characters out of 200,000) so it runs in minutes on 2 CPU
cores. Overrides make it larger, e.g. on a GPU: model.n_embd=128 data.batch_size=64 data.block_size=128
data.max_chars=1000000 --max-steps 2000.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir

import lab.config
from lab import runtime
from lab.data.datasets import build as build_data
from lab.data.loaders import make_loader
from lab.models.common import build as build_model
from lab.optim.optimizers import build_optimizer
from lab.optim.schedulers import build_scheduler

CONF = Path(__file__).resolve().parents[4] / "conf"
TINY = [
    *("data.max_chars=200000", "data.block_size=32", "data.batch_size=16"),
    *("model.n_layer=2", "model.n_embd=64", "model.n_head=4"),
]
CONTENDERS = {
    "adamw + cosine": ["optimizer=adamw", "scheduler=cosine"],
    "muon + wsd": ["optimizer=muon", "scheduler=wsd"],
}


def race(cfg, datamodule, device, args) -> tuple[int | None, float, float]:
    """Train with the config's optimizer and schedule from the seed's weights and batch order.

    Return the steps to --target (None if never reached), the training seconds and the last validation loss."""
    runtime.seed_everything(cfg.seed)
    model = build_model(cfg.model, datamodule.meta).to(device)
    optimizer = build_optimizer(cfg.optimizer, model, cfg.model, device)
    schedule = build_scheduler(cfg.scheduler, optimizer, args.max_steps)
    pin, seeded = device.type == "cuda", torch.Generator().manual_seed(0)
    loader = make_loader(datamodule.train, cfg.data, train=True, generator=seeded, pin_memory=pin)
    val_loader = make_loader(datamodule.val, cfg.data, train=False, generator=None, pin_memory=pin)
    val = [batch for batch, _ in zip(val_loader, range(args.eval_batches))]
    steps, seconds, loss = 0, 0.0, float("inf")
    while steps < args.max_steps:
        for inputs, targets in loader:
            start = time.perf_counter()
            model.train()
            inputs, targets = inputs.to(device), targets.to(device)
            logits = model(inputs)
            F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds += time.perf_counter() - start
            steps += 1
            if steps % args.eval_every == 0 or steps == args.max_steps:
                loss = evaluate(model, val, device)
                print(f"  {cfg.optimizer.name}: step {steps}, val loss {loss:.3f}", file=sys.stderr, flush=True)
                if loss <= args.target:
                    return steps, seconds, loss
            if steps == args.max_steps:
                break
    return None, seconds, loss


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list, device: torch.device) -> float:
    model.eval()
    losses = [F.cross_entropy(model(x.to(device)).flatten(0, 1), y.to(device).flatten()) for x, y in batches]
    return float(torch.stack(losses).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=2.5, help="validation loss to reach (nats per character)")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    configs = {}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for name, contender in CONTENDERS.items():
            configs[name] = compose("train", overrides=["experiment=char_lm", *TINY, *contender, *args.overrides])
            lab.config.validate(configs[name])
    cfg = configs[name]  # the data and the model are the same for both
    device = runtime.select_device(cfg.trainer.device)
    datamodule = build_data(cfg.data)
    rows = {name: race(cfg, datamodule, device, args) for name, cfg in configs.items()}
    print(f"to val loss {args.target} (char GPT, {device}, at most {args.max_steps} steps):")
    for name, (steps, seconds, loss) in rows.items():
        reached = f"{steps} steps" if steps else f"not reached (val loss {loss:.3f})"
        print(f"  {name:15s} {reached:>32s}  {seconds:7.1f} s")
    (base_steps, base_s, _), (muon_steps, muon_s, _) = rows.values()
    if base_steps and muon_steps:
        print(f"muon + wsd / adamw + cosine: {muon_steps / base_steps:.2f}x the steps, {muon_s / base_s:.2f}x the time")


if __name__ == "__main__":
    main()
