"""DataLoader tuning, model-free:

    python -m lab.extensions.tools.bench_data [train overrides] [--workers 0,2,4] [--batch-sizes 64,128]

It composes the train config, so every train override works (`data=cifar10 data.root=...`, `experiment=char_lm`).
Then it measures the training loader's samples/s over num_workers x pin_memory (CUDA only) x persistent_workers,
optionally x batch sizes, and prints the table and the overrides to train with (loader_bench). Writes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra import compose, initialize_config_dir

from lab import cli

CONF = Path(__file__).resolve().parents[4] / "conf"  # the repository's conf/


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 0,2,4, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0 like 0,2,4, got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lab.extensions.tools.bench_data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workers", type=_ints, help="num_workers values (default: 0 and 2, 4, 8 up to the CPUs)")
    parser.add_argument("--batch-sizes", type=_ints, help="batch sizes (default: data.batch_size)")
    parser.add_argument(
        "--pin-memory",
        choices=("auto", "both", "true", "false"),
        default="auto",
        help="auto: both on CUDA, false elsewhere (pinning only helps copies to a CUDA device)",
    )
    parser.add_argument("--epochs", type=int, default=2, help="passes per setting (worker start-up counts per pass)")
    parser.add_argument("--batches", type=int, default=50, help="batches per pass at most (default 50)")
    parser.add_argument("overrides", nargs="*", help="train overrides: data=digits data.batch_size=128 ...")
    args = parser.parse_intermixed_args()
    if args.epochs < 1 or args.batches < 1:
        parser.error("--epochs and --batches must be >= 1")
    if args.batch_sizes is not None and min(args.batch_sizes) < 1:
        parser.error("--batch-sizes must be >= 1")
    pins = {"auto": None, "both": [False, True], "true": [True], "false": [False]}[args.pin_memory]

    with cli.concise_config_errors(), initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=args.overrides)
    with cli.user_errors():
        from lab.config import validate

        validate(cfg)
        from lab.extensions.tools import loader_bench  # imports torch, so only once the config is good

        loader_bench.run(
            cfg,
            workers=args.workers,
            batch_sizes=args.batch_sizes,
            pin_memory=pins,
            epochs=args.epochs,
            batches=args.batches,
        )


if __name__ == "__main__":
    main()
