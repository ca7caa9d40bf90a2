"""Constants and small helpers shared by the test suites (importable as ``helpers``: pytest puts tests/ on sys.path
because tests/conftest.py lives there)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import lab.config
from lab import extensions
from warm_python import run_python

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"
TRAIN_SCRIPT = REPO / "scripts" / "train.py"
PYTHON = sys.executable

# The presets' folders, as Hydra searches them: the repository's conf/ first (its preset wins over an extension's of
# the same name), then each extension's conf/.
CONF_DIRS = (CONF_DIR, *extensions.conf_dirs())

# Config groups whose options are files in conf/<group>/*.yaml.
GROUPS = ("task", "data", "model", "optimizer", "scheduler", "precision", "dist", "trainer", "debug", "experiment")


def compose_config(overrides: Sequence[str] = (), config_name: str = "train") -> DictConfig:
    """Compose conf/<config_name>.yaml like the entry scripts do; Hydra's global state is cleared afterwards."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=False)


def group_options(group: str) -> list[str]:
    """The options of one config group: the option classes lab.config stores in Hydra's ConfigStore (a fork's too)
    and the presets on disk (a new conf/<group>/x.yaml is picked up, an extension's too)."""
    from hydra.core.config_store import ConfigStore

    group_node = ConfigStore.instance().repo.get(group, {})
    stored = {name.removesuffix(".yaml") for name, node in group_node.items() if not isinstance(node, dict)}
    return sorted(stored | {path.stem for conf in CONF_DIRS for path in (conf / group).glob("*.yaml")})


def forget_option(option: type) -> None:
    """Undo defining a fork's option class in a test: later compositions in this worker (and group_options) no
    longer see it, as a subprocess never did."""
    from hydra.core.config_store import ConfigStore

    from lab.config import options

    group = option.config_group
    name = next(name for name, found in options._OPTIONS[group].items() if found is option)
    del options._OPTIONS[group][name]
    stored = option.stored_as(name)
    if stored is not None:
        ConfigStore.instance().repo.get(stored[0], {}).pop(f"{name}.yaml", None)
    lab.config.register()


def preset_file(group: str, option: str) -> Path | None:
    """The YAML of the preset `<group>=<option>` that Hydra composes (CONF_DIRS' order); None for an option class."""
    return next(
        (conf / group / f"{option}.yaml" for conf in CONF_DIRS if (conf / group / f"{option}.yaml").is_file()), None
    )


def checkout_files(repo: Path = REPO) -> list[Path]:
    """The files of a checkout as a clone would have them: what git tracks, and new files it would add."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout.split("\0")  # fmt: skip
    return sorted(repo / rel for rel in listed if rel and (repo / rel).is_file())


def write_tiny_cifar10(root: Path, per_batch: int) -> None:
    """CIFAR-10's python format (pickled dicts of uint8 rows, 3x32x32 each), small: no download here."""
    folder = root / "cifar-10-batches-py"
    import pickle

    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"labels": [i % 10 for i in range(per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    names = [f"class{i}".encode() for i in range(10)]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))


def core_pages() -> list[Path]:
    """The README and the pages of docs/ (the site's pages, less each extension's)."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def extension_pages() -> list[Path]:
    """Each present extension's page (src/lab/extensions/<name>/README.md)."""
    return sorted((REPO / "src" / "lab" / "extensions").glob("*/README.md"))


def extensions_listed() -> set[str]:
    """The template's extensions, as docs/architecture.md's table lists them: a page may still name one of them, and
    its files, after `make drop` removed it (the page then tells of what the fork dropped, not of a typo)."""
    table = (REPO / "docs" / "architecture.md").read_text()
    return set(re.findall(r"^\| \[`(\w+)`\]\(\.\./src/lab/extensions/", table, flags=re.M))


def doc_pages() -> list[Path]:
    """Every page of the documentation: the core's, then each extension's."""
    return core_pages() + extension_pages()


def readme_commands(page: Path = REPO / "README.md") -> list[str]:
    """The `python ...` and `make train ...` lines of a page's ```bash blocks (test_readme runs each)."""
    text = page.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return list(dict.fromkeys(line for line in lines if line.startswith(("python ", "make train "))))


def shell_block_commands(page: Path = REPO / "README.md") -> list[tuple[str, str]]:
    """(section heading, command) for every line of every ```sh block of a page (its comment left out): what
    test_readme does not run as written, and the tests that run them do."""
    text = page.read_text()
    found = []
    for block in re.finditer(r"```sh\n(.*?)```", text, flags=re.S):
        start = text.rfind("\n## ", 0, block.start()) + 1
        section = text[start : text.index("\n", start)]
        found += [(section, line.split("  #")[0].strip()) for line in block.group(1).splitlines() if line.strip()]
    return found


def load_file(path: Path) -> ModuleType:
    """A script or bench file (not a package module) imported as a module named by its stem, kept in sys.modules
    while it runs (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def script_env() -> dict[str, str]:
    """Environment for running an entry script in a subprocess: Hydra's short error format, no colour codes."""
    env = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


@dataclass
class Run:
    proc: subprocess.CompletedProcess
    dir: Path

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    def metrics(self) -> list[dict]:
        return [json.loads(line) for line in (self.dir / "metrics.jsonl").read_text().splitlines()]

    def summary(self) -> dict:
        return json.loads((self.dir / "summary.json").read_text())

    def weights(self, name: str = "last.pt") -> dict:
        import torch

        return torch.load(self.dir / "checkpoints" / name, weights_only=True)["model"]


# Runs the entry script named by its first argument as `python scripts/<script> ...` would, after a patch.
_THEN_RUN_THE_SCRIPT = """
import runpy as _runpy, sys as _sys
_sys.argv = _sys.argv[1:]
_runpy.run_path(_sys.argv[0], run_name="__main__")
"""


def run_script(
    script: str,
    *overrides: str,
    cwd: Path | None = None,
    timeout: float = 300,
    patch: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run scripts/<script> the way a user does, in a process of its own (tests/warm_python.py). `patch`: Python
    code run first in that process (to fake a fault where no real one can be arranged: a kill at a chosen moment, a
    perturbed writer). `env`: the environment, script_env() by default."""
    args = [str(REPO / "scripts" / script), *overrides]
    if patch is not None:
        args = ["-c", patch + _THEN_RUN_THE_SCRIPT, *args]
    return run_python(args, cwd=cwd or REPO, env=env or script_env(), timeout=timeout)


def plugins_env() -> dict[str, str]:
    """script_env() with tests/integration/plugins importable: the tests' own callback options, which its
    sitecustomize.py registers in every process that starts there (spawned ranks inherit it)."""
    env = script_env()
    env["PYTHONPATH"] += os.pathsep + str(REPO / "tests" / "integration" / "plugins")
    return env


def made_once(path: Path, make: Callable[[], object]) -> Path:
    """`make()` (which writes `path`) unless another xdist worker of this session did it already: under a file lock,
    with a marker written after it succeeded (a failed attempt leaves none: the next asker tries, and fails, itself)."""
    from filelock import FileLock

    done = path.with_name(path.name + ".done")
    with FileLock(path.with_name(path.name + ".lock")):
        if not done.exists():
            make()
            done.touch()
    return path


def max_abs_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel())


def in_process_trainer(cfg: DictConfig, model, task, loader, run_dir: Path, total_steps: int = 100, utilization=None):
    """A Trainer on the CPU for unit tests: the config's optimizer, schedule, precision, trainer settings and
    callbacks; no validation loader; a local-only Tracker in `run_dir` (call `trainer.tracker.finish()` when done)."""
    import torch

    from lab.checkpointing import CheckpointManager
    from lab.data.loaders import EpochLoader
    from lab.distributed.parallel import Parallel
    from lab.optim.optimizers import build_optimizer
    from lab.optim.schedulers import build_scheduler
    from lab.runtime import resolve_precision
    from lab.tracking import Tracker
    from lab.training.trainer import Trainer

    cpu = torch.device("cpu")
    optimizer = build_optimizer(cfg.optimizer, model, cfg.model)
    return Trainer(
        model=model,
        optimizer=optimizer,
        scheduler=build_scheduler(cfg.scheduler, optimizer, total_steps),
        task=task,
        train_batches=EpochLoader(loader, None, seed=0, limit=cfg.trainer.limit_train_batches),
        val_loader=None,
        device=cpu,
        precision=resolve_precision(cfg.precision, cpu),
        cfg=cfg.trainer,
        tracker=Tracker(run_dir).start(),
        checkpoints=CheckpointManager(run_dir, Parallel()),
        callbacks=cfg.callbacks,
        utilization=utilization,
    )


# lab.distributed.meta_init: each model option that declares replayable_init, small, on data of its kind: (model
# node, data meta). Odd sizes (3 and 5 classes, a 37-token vocabulary) shard unevenly over 2 ranks; a frozen part
# and BatchNorm (its running statistics are buffers) are covered.
META_INIT_CASES = {
    "mlp": ({"name": "mlp", "hidden_dims": [16, 8]}, {"input_shape": [1, 4, 4], "num_outputs": 3}),
    "cnn": (
        {"name": "cnn", "channels": [4, 8], "freeze": ["blocks.0.*"]},
        {"input_shape": [3, 8, 8], "num_outputs": 5},
    ),
    "gpt": ({"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16}, {"vocab_size": 37, "block_size": 8}),
}
