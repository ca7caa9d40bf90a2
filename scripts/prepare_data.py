"""Turn data into a form training reads without holding it in memory, once:

    python scripts/prepare_data.py data=<option> data.source=<raw data> data.path=<folder>
    python scripts/prepare_data.py data=<option> data.path=<folder> --verify   # every part's sha256

The same `data=` keys as training (any train override is accepted, so a command line can be shared), then the
data option's ``prepare()`` writes data.path (``--verify``: its ``verify()`` checks what was written). The options
read from prepared files override both; every other option refuses in one line, naming those that have prepared
files (DataConfig.prepare). Nothing else is written (no run dir).
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
    parser.add_argument("overrides", nargs="*", help="data=<option> data.source=... data.path=...")
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
