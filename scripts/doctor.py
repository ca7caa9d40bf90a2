"""Environment doctor: `python scripts/doctor.py` (or `make doctor`).

Prints one row per check (Python, torch + CUDA/cuDNN/NCCL, the NVIDIA driver, each GPU's memory and a matmul on it,
bf16/TF32, free disk under outputs/, the wandb mode a run would use, packages against requirements.txt) and, for each
failure, its fix; exits 1 when something is broken (lab.tools.doctor).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.tools import doctor

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outputs", type=Path, default=REPO / "outputs", help="where runs are written (disk check)")
    parser.add_argument("--requirements", type=Path, default=REPO / "requirements.txt")
    parser.add_argument("--min-free-gb", type=float, default=1.0, help="less free disk than this fails (GiB)")
    args = parser.parse_args()
    rows = list(doctor.run_checks(args.outputs, args.requirements, args.min_free_gb))
    text, status = doctor.report(rows)
    print(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
