"""LR range test on the train config: `python scripts/lr_find.py [train overrides] [--steps 100]`.

Every train override works (`experiment=char_lm`, `model=mlp optimizer=sgd`, `data.batch_size=128`...). A copy of
the model is trained for up to --steps batches while the LR grows exponentially from --start-lr to --end-lr; the
sweep stops when the smoothed loss exceeds --diverge times its best. The run dir (outputs/lr_find/<stamp>/) gets
lr_find.png (loss vs LR, the suggestion marked) and lr_find.json; the suggested LR and the override that sets it
are printed (lab.tools.lr_find). torch is imported only inside main(), so `--help` and `--cfg job` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

import hydra
from omegaconf import DictConfig

from lab import cli
from lab.errors import UserError
from lab.tools.lr_find import Options

HELP = {
    "start_lr": "first LR of the sweep",
    "end_lr": "last LR of the sweep",
    "steps": "batches (optimizer steps) at most",
    "diverge": "stop once the smoothed loss exceeds this many times its best",
    "smoothing": "factor of the loss's exponential moving average (0 = none)",
}


def parse_options(argv: list[str]) -> tuple[Options, list[str]]:
    """The tool's --flags (defaults: lab.tools.lr_find.Options) and the rest of the command line, Hydra's."""
    parser = argparse.ArgumentParser(
        prog="scripts/lr_find.py",
        usage="python scripts/lr_find.py [train overrides ...] [--start-lr LR] [--end-lr LR] [--steps N] ...",
        add_help=False,
        allow_abbrev=False,
    )
    for field in fields(Options):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, dest=field.name, type=type(field.default), default=argparse.SUPPRESS,
                            help=f"{HELP[field.name]} (default {field.default:g})")  # fmt: skip
    if {"-h", "--help"} & set(argv):
        print(parser.format_help())  # then Hydra's help: the train overrides
    ours, rest, tokens = [], [], iter(argv)
    flags = {"--" + field.name.replace("_", "-") for field in fields(Options)}
    for token in tokens:  # Hydra's arguments keep their order (`--cfg job`, `-m a=1,2`)
        if token.split("=", 1)[0] in flags:
            ours += [token] if "=" in token else [token, next(tokens, "")]
        else:
            rest.append(token)
    return Options(**vars(parser.parse_args(ours))), rest


OPTIONS = Options()


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from lab.config import validate

    with cli.user_errors():
        validate(cfg)
        from lab.tools import lr_find

        return lr_find.run(cfg, HydraConfig.get().runtime.output_dir, OPTIONS).suggestion


if __name__ == "__main__":
    try:
        OPTIONS, hydra_args = parse_options(sys.argv[1:])
    except UserError as err:
        sys.exit(f"error: {err}")
    if not any(arg.startswith("task_name=") for arg in hydra_args):
        hydra_args.append("task_name=lr_find")  # run dirs under outputs/lr_find/
    sys.argv = [sys.argv[0], *hydra_args]
    cli.main(main, "lr_find")
