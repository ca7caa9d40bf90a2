"""Every command the README, the pages of docs/ and the extensions' pages show must work as written (shortened with
debug=fast where it trains; placeholders such as outputs/train/<run> point at runs the module makes)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, core_pages, doc_pages, extension_pages, readme_commands, script_env, shell_block_commands
from warm_python import run_python

pytestmark = pytest.mark.slow

SMALL_SYNTHETIC_ROWS = ["data=synthetic data.num_samples=256", "data=synthetic data.num_samples=256 data.augment=true"]
# the benchmarks' shortest settings: the test checks that they run, not their figures
QUICK_BENCH_ARGS = {
    "bench/loop_overhead.py": ["--epochs", "1", "--repeats", "1"],
    "bench/tracking_overhead.py": ["--runs", "1"],
    "bench/sweep_overhead.py": ["--jobs", "2", "debug=fast", "model=mlp", "logger=none"],  # its default, no wandb
    # its in-process check, a fit (5 s): the checks that start the CLI under FSDP, DDP or compile take 30 s each on
    # the CPU and run what tests/integration/test_combinations.py runs
    "bench/gpu_smoke.py": ["--checks", "peak_memory_after_large_free"],
    "bench/startup.py": ["--repeats", "1"],
    "bench/sharded_checkpoint.py": ["--params", "1e6", "--repeats", "1"],
    "bench/meta_init.py": ["--layers", "1", "--width", "64", "--vocab", "256"],
    # its three rows (digits; CIFAR-sized synthetic images, plain and augmented), the synthetic ones on 256 images
    # instead of 2048
    "bench/device_loader.py": ["--epochs", "1", "--repeats", "1", "--rows", "data=digits", *SMALL_SYNTHETIC_ROWS],
}


# commands another test runs as written (and checks more closely): the footprint, test_budget.py
RUN_BY_ANOTHER_TEST = ("bench/footprint.py",)


def test_the_readmes_quick_start_opens_with_the_two_setup_commands():
    text = (REPO / "README.md").read_text()
    assert text.startswith("# ") and "## Quick start\n\n```bash\nmake train\nmake test\n```\n" in text


def test_the_pages_show_the_commands_this_test_runs():
    commands = [command for page in core_pages() for command in readme_commands(page)]
    assert any("-m " in c for c in commands) and any("ckpt_path=" in c for c in commands)
    assert any(c.startswith("python bench/") for c in commands)


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
    "outputs/train/multirun/<stamp>": "finished_sweep",
    "path/to/images/": "sample_images",
    "data/houses.csv": "houses_csv",
}


# a command shown on several pages (the README's quick start repeats some) runs once, under the first page's name
PAGE_COMMANDS = [
    pytest.param(command, id=f"{page.relative_to(REPO).as_posix()}: {command}")
    for command, page in {c: p for p in reversed(doc_pages()) for c in readme_commands(p)}.items()
    if not any(k in command for k in RUN_BY_ANOTHER_TEST)
]


@pytest.mark.parametrize("command", PAGE_COMMANDS)
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
    elif args[1] == "-m":  # an extension's command (no Hydra): from the test's folder, where what it writes stays
        proc = run_python(args[1:], cwd=tmp_path, env=script_env(), timeout=300)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return
    elif "--cfg" not in args:
        # only training has a debug group; eval/export/infer are already quick on a debug checkpoint
        if args[1] == "scripts/train.py" and not any(a.startswith("debug=") for a in args):
            args.append("debug=fast")
        if args[1:] == ["scripts/train.py", "debug=fast"]:
            # `python scripts/train.py` (shortened) and `... debug=fast`: exactly the command the session's
            # finished_run fixture runs (and asserts to exit 0): that run is this command's, not run a second time
            run = request.getfixturevalue("finished_run")
            assert json.loads((run / "summary.json").read_text())["status"] == "completed"
            return
        if not any(a.startswith("logger") for a in args):  # wandb, the default tracker, costs a run ~3 s of CPU:
            # finished_run (the bare command) and the commands that name a tracker run it; test_tracking reads it
            args.append("logger=none")
        if "debug=overfit" in args:  # 150 epochs of one batch; 15 run the same loop (tests/integration/test_train.py
            # checks that the 150 drive the loss to ~0)
            args.append("trainer.max_epochs=15")
        args.append(f"hydra.sweep.dir={tmp_path}" if "-m" in args else f"hydra.run.dir={tmp_path}")
    proc = run_python(args[1:], cwd=REPO, env=script_env(), timeout=300)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    if args[1] == "scripts/train.py" and "-m" in args:  # every job of the sweep ran to the end, in a dir of its own
        jobs = [json.loads(path.read_text()) for path in tmp_path.glob("[0-9]*/summary.json")]
        assert len(jobs) >= 2 and {job["status"] for job in jobs} == {"completed"}, command


# ```sh blocks hold what this test does not run as written. The sections below (a page's heading, or its title for
# the lines before its first section) are run by their own tests, which name the page; the tab-completion lines run
# in bash here; every other line is listed with why and with the test that checks what it does (that test must exist
# and mention it).
SECTIONS_RUN_ELSEWHERE = {
    # make install reinstalls .venv; docker and apptainer are not here
    "# Install and environments": ("tests/unit/test_packaging.py", "docs/install.md"),
    "## Containers": ("tests/unit/test_packaging.py", "docs/distributed.md"),
    "## Add your own model, dataset or task": ("tests/integration/test_extension.py", "docs/extending.md"),
    # in a fork it makes
    "## Take the template's later fixes": ("tests/integration/test_template_update.py", "docs/extending.md"),
}
NOT_RUN_AS_WRITTEN = {
    "git checkout <git_commit>": ("would change this work tree", "tests/integration/test_reproduce.py", "git_commit"),
    "git apply outputs/train/<run>/provenance/git.diff": (
        "would change this work tree",
        "tests/integration/test_reproduce.py",
        "git_dirty",
    ),
    "python scripts/train.py <the overrides of .hydra/overrides.yaml>": (
        "its overrides are read from a finished run's dir",
        "tests/integration/test_reproduce.py",
        "overrides.yaml",
    ),
    "python scripts/train.py -m 'experiment=glob(*)' debug=fast": (
        "the CIFAR-10 experiments need their data: the sweep test writes a tiny copy (an extension's experiments run "
        "in its own tests)",
        "tests/integration/test_sweeps.py",
        "experiment=glob(*,exclude=[",
    ),
    "make rename NAME=myproject": ("rewrites this repository", "tests/integration/test_rename.py", "rename.py"),
    "make update": ("changes this repository", "tests/integration/test_template_update.py", '"make update"'),
    "make drop EXT=report": ("removes an extension from this tree", "tests/integration/test_extensions.py", "drop"),
}


@pytest.mark.parametrize("page", core_pages(), ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_shell_block_command_is_checked(page):
    for section, command in shell_block_commands(page):
        if section in SECTIONS_RUN_ELSEWHERE or command.startswith('eval "$(python scripts/'):
            continue
        assert command in NOT_RUN_AS_WRITTEN, f"{page}: {command!r} ({section}) is run by no test: use a bash block"
    for test_file, mention in [*SECTIONS_RUN_ELSEWHERE.values(), *((f, m) for _, f, m in NOT_RUN_AS_WRITTEN.values())]:
        assert mention in (REPO / test_file).read_text(), (test_file, mention)


@pytest.mark.parametrize("page", extension_pages(), ids=lambda page: page.parent.name)
def test_every_shell_block_command_of_an_extension_page_is_checked_by_its_tests(page):
    """An extension's page and the tests that check what it shows go together (dropping one drops both): each line
    of its ```sh blocks is quoted, as written, by a test in its own tests/ folder."""
    tests = "\n".join(path.read_text() for path in (page.parent / "tests").rglob("test_*.py"))
    for section, command in shell_block_commands(page):
        assert command in tests, f"{page}: {command!r} ({section}) is quoted by no test of {page.parent}/tests"


def test_tab_completion_installs_and_uninstalls():
    lines = [c for page in core_pages() for _, c in shell_block_commands(page)]
    install, uninstall = [c for c in lines if c.startswith('eval "$(python scripts/')]
    # installed: `python` completes through Hydra's function; uninstalled: the function is gone
    function = "declare -F hydra_bash_completion"
    script = f"{install}\ncomplete -p python\n{function}\n{uninstall}\n! {function}"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "hydra_bash_completion" in proc.stdout, proc.stdout + proc.stderr


def _python(*args: str) -> subprocess.CompletedProcess:
    """`python <args>` from the repository root, as a user runs it; its output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=60
    )


def test_help_lists_the_groups():
    proc = _python("scripts/train.py", "--help")
    assert proc.returncode == 0
    for group in ("model:", "data:", "optimizer:", "scheduler:", "precision:", "dist:"):
        assert group in proc.stdout
