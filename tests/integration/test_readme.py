"""Every command the README shows must work as written (shortened with debug=fast where it trains; placeholders
such as outputs/train/<run> point at runs the module makes)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from helpers import REPO, run_script

pytestmark = pytest.mark.slow

# the benchmarks' shortest settings: the test checks that they run, not their figures
QUICK_BENCH_ARGS = {
    "bench/loop_overhead.py": ["--epochs", "1", "--repeats", "1"],
    "bench/tracking_overhead.py": ["--runs", "1"],
    "bench/sweep_overhead.py": ["--jobs", "2"],
    "bench/gpu_smoke.py": ["--checks", "fsdp_batchnorm_bf16"],
}


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.startswith(("python ", "make train "))]


def test_the_readme_starts_with_the_two_setup_commands():
    assert (REPO / "README.md").read_text().startswith("```bash\nmake train\nmake test\n```\n")


def test_readme_shows_the_commands_this_test_runs():
    commands = readme_commands()
    assert any("-m " in c for c in commands) and any("ckpt_path=" in c for c in commands)
    assert any(c.startswith("python bench/") for c in commands)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("readme") / "base"
    proc = run_script("train.py", "debug=fast", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def finished_export(finished_run):
    """An export run dir (model.onnx, model.pt2 and their manifest) for the README's `outputs/export/<run>`."""
    run_dir = finished_run.parent / "export"
    proc = run_script(
        "export.py",
        f"ckpt_path={finished_run}/checkpoints/best.pt",
        "export.formats=[onnx,pt2]",
        "logger=none",
        f"hydra.run.dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def sample_images(tmp_path_factory):
    """A few digit images for the README's `path/to/images/`."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("images")
    for index, image in enumerate(load_digits().images[:5]):
        Image.fromarray((image * 255 / 16).round().astype(np.uint8)).save(folder / f"{index}.png")
    return folder


@pytest.fixture(scope="module")
def houses_csv(tmp_path_factory):
    """A small table with a numeric `price` target for the README's `data/houses.csv`."""
    path = tmp_path_factory.mktemp("table") / "houses.csv"
    rows = [f"{rooms},{area},{2 * rooms + 0.5 * area}" for rooms in range(1, 9) for area in range(20, 140, 10)]
    path.write_text("rooms,area,price\n" + "\n".join(rows) + "\n")
    return path


# placeholder in a README command -> fixture that provides it (created only when a command needs it)
PLACEHOLDERS = {
    "outputs/train/<run>": "finished_run",
    "outputs/export/<run>": "finished_export",
    "path/to/images/": "sample_images",
    "data/houses.csv": "houses_csv",
}


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs(command, tmp_path, request):
    for placeholder, fixture in PLACEHOLDERS.items():
        if placeholder in command:
            path = str(request.getfixturevalue(fixture))
            command = command.replace(placeholder, path + ("/" if placeholder.endswith("/") else ""))
    if command.startswith("make train "):  # the Makefile passes ARGS through to scripts/train.py
        command = "python scripts/train.py " + shlex.split(command)[2].removeprefix("ARGS=")
    args = shlex.split(command)
    args[0] = sys.executable
    if args[1].startswith("bench/"):
        args += QUICK_BENCH_ARGS[args[1]]
    elif "--cfg" not in args:
        # only training has a debug group; eval/export/infer are already quick on a debug checkpoint
        if args[1] == "scripts/train.py" and not any(a.startswith("debug=") for a in args):
            args.append("debug=fast")
        search = any(a.startswith("hparams_search=") for a in args)  # a sweep without -m (hydra.mode=MULTIRUN)
        args.append(f"hydra.sweep.dir={tmp_path}" if "-m" in args or search else f"hydra.run.dir={tmp_path}")
        if search:  # a study of its own, not the one under outputs/, and two trials only
            args += [f"hydra.sweeper.storage=sqlite:///{tmp_path}/optuna.db", "hydra.sweeper.n_trials=2"]
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def test_help_lists_the_groups():
    proc = subprocess.run(
        [sys.executable, "scripts/train.py", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    for group in ("model:", "data:", "optimizer:", "scheduler:", "precision:", "dist:"):
        assert group in proc.stdout
