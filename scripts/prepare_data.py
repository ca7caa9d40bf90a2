"""Turn data into a form training reads without holding it in memory, once:

    python scripts/prepare_data.py data=shards data.source=/images data.path=/data/images-shards
    python scripts/prepare_data.py data=tokens data.source=corpus.txt data.path=/data/corpus-tokens
    python scripts/prepare_data.py data=hf data.source=big.csv data.path=/data/big-arrow
    python scripts/prepare_data.py data=shards data.path=/data/images-shards --verify   # every part's sha256

The same `data=` keys as training (any train override is accepted, so a command line can be shared), then the
data option's ``prepare()`` writes data.path: parts under temp names, renamed when complete, a progress bar, and
`manifest.json` last (lab.data.prepared). An interrupted prepare is finished by running the same command again;
training refuses a partial, stale or damaged folder in one line. Nothing else is written (no run dir).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from hydra import compose, initialize_config_dir

from lab import cli

CONF = Path(__file__).resolve().parents[1] / "conf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verify", action="store_true", help="check every part of data.path against its checksum")
    parser.add_argument("overrides", nargs="*", help="data=shards data.source=... data.path=...")
    args = parser.parse_intermixed_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with cli.concise_config_errors(), initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=args.overrides)
    with cli.user_errors():
        from lab.config import options, validate

        validate(cfg)
        option = options.instantiate("data", cfg.data)
        if args.verify:
            option.verify()
        else:
            option.prepare()


if __name__ == "__main__":
    main()
