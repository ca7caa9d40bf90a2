"""One self-contained HTML page for a run or a sweep:

    python -m lab.extensions.report <run dir | sweep dir> [-o report.html]

It shows loss and metric curves per run, the sweep's jobs in a table sortable by any column, the best run's config
against the others', and links to its checkpoints and to the eval/export/infer runs made from them. It writes
`<dir>/report.html` unless -o says where; open it in any browser, offline. It imports no torch, so it starts at once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lab import cli
from lab.extensions.report import write_report


def main() -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "source", type=Path, help="a run dir (outputs/train/<stamp>) or a sweep dir (.../multirun/<stamp>)"
    )
    parser.add_argument("-o", "--output", type=Path, help="the HTML file to write (default: <source>/report.html)")
    args = parser.parse_args()
    with cli.user_errors():
        print(f"report: {write_report(args.source, args.output)}")


if __name__ == "__main__":
    main()
