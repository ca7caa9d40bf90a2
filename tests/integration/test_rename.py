"""`make rename NAME=...` (scripts/rename.py) in a copy of the repository: no mention of the old package name is
left, the renamed package imports, composes and runs a sweep through its renamed Hydra plugin, a second run with
the same name changes nothing, and bad names and a dirty git tree are refused with one line.

The old name is read from pyproject.toml, never written here: the test keeps working in a fork that was renamed.
The copy is the repository as it is now (what git tracks plus new files it would add), committed in a fresh git
repository, so the rename under test is the one being changed; in CI that is the checked-out commit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow

OLD = re.search(r'^name\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)
NEW = "myproject" if OLD != "myproject" else "myproject2"


def _mentions(name: str) -> re.Pattern[str]:
    """`name` as a word of its own, also right after a string's escape (the `n` of a newline's, the `t` of a tab's)."""
    return re.compile(rf"(?:(?<![A-Za-z0-9_])|(?<=\\[abfnrtv])){re.escape(name)}(?![A-Za-z0-9])")


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _files(repo: Path) -> list[Path]:
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=repo).split("\0")
    return sorted(repo / rel for rel in listed if rel and (repo / rel).is_file())


def _snapshot(repo: Path) -> dict[str, str]:
    return {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(repo)}


def _copy(dest: Path) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of the repository")
    for path in _files(REPO):
        target = dest / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    _git("init", "-q", cwd=dest)
    _git("add", "-A", cwd=dest)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fork", cwd=dest)
    return dest


def _env(repo: Path) -> dict[str, str]:
    """The copy's own src/ on the path (not this repository's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HYDRA_FULL_ERROR")}
    env.update(PYTHONPATH=str(repo / "src"), NO_DOTENV="1", WANDB_MODE="disabled")
    return env


def _rename(repo: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/rename.py", *args, "--no-install", "--python", sys.executable]
    return subprocess.run(cmd, cwd=repo, env=_env(repo), capture_output=True, text=True, timeout=120)


@pytest.fixture
def fork(tmp_path) -> Path:
    return _copy(tmp_path / "fork")


def _make_rename(repo: Path, args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "rename", f"NAME={NEW}", f"ARGS={args}", f"PYTHON={sys.executable}"],
        cwd=repo,
        env={**_env(repo), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A copy renamed through the Makefile, as a user does it (without reinstalling: the copy has no .venv; this
    Python's ruff formats, the one the test lints with)."""
    repo = _copy(tmp_path_factory.mktemp("renamed") / "fork")
    return repo, _make_rename(repo, f"--no-install --python {sys.executable}")


def _lint(repo: Path) -> None:
    """What `make lint` runs."""
    for check in (["check", "."], ["format", "--check", "."]):
        ruff = subprocess.run([sys.executable, "-m", "ruff", *check], cwd=repo, capture_output=True, text=True)
        assert ruff.returncode == 0, ruff.stdout[-2000:]


def test_no_mention_of_the_old_name_is_left(renamed):
    repo, proc = renamed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"renamed {OLD} -> {NEW}" in proc.stdout
    left = [
        f"{path.relative_to(repo)}:{number}: {line.strip()}"
        for path in _files(repo)
        if b"\0" not in path.read_bytes()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if _mentions(OLD).search(line)
    ]
    assert left == []
    assert [p for p in _files(repo) if _mentions(OLD).search(str(p.relative_to(repo)))] == []
    assert (repo / "src" / NEW / "__init__.py").is_file() and not (repo / "src" / OLD).exists()
    assert (repo / "src/hydra_plugins" / f"{NEW}_sweepers" / "__init__.py").is_file()
    assert f'name = "{NEW}"' in (repo / "pyproject.toml").read_text()
    # imports re-sorted, code re-wrapped for the new name's length, docstring and comment lines wrapped: lint passes
    _lint(repo)


def test_a_fork_without_an_environment_is_formatted_by_the_ruff_make_lint_will_install(tmp_path):
    """No .venv and no ruff given: the rename installs the ruff requirements.txt pins into a scratch folder
    (`make install` installs the same version later) and formats with it."""
    repo = _copy(tmp_path / "fork")
    try:  # pip gives up soon where no index answers
        proc = _make_rename(repo, "--no-install", PIP_DEFAULT_TIMEOUT="20", PIP_RETRIES="1")
    except subprocess.TimeoutExpired:
        pytest.skip("pip cannot reach a package index here")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if "could not install" in proc.stderr:
        pytest.skip(f"pip cannot install ruff here: {proc.stderr.strip()}")
    assert "installed for the rename as requirements.txt pins it" in proc.stdout, proc.stdout + proc.stderr
    assert not (repo / ".venv").exists()
    _lint(repo)


def test_the_renamed_package_imports_composes_and_sweeps(renamed, tmp_path):
    repo, proc = renamed
    assert proc.returncode == 0, proc.stderr
    env = _env(repo)

    def python(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    imported = python("-c", f"import {NEW}.config, {NEW}.tracking; print({NEW}.config.__file__)")
    assert imported.stdout.strip() == str(repo / "src" / NEW / "config" / "__init__.py")
    composed = python("scripts/train.py", "--cfg", "all").stdout
    assert f"${{{NEW}.direction:" in composed and f"_target_: {NEW}.sweeps.SweepSummary" in composed
    # one sweep job: the renamed grid sweeper plugin, the summary callback and the training workflow
    sweep = tmp_path / "sweep"
    python("scripts/train.py", "-m", "debug=fast", "model=mlp", "logger=csv", "seed=1", f"hydra.sweep.dir={sweep}")
    assert (sweep / "0" / "metrics.jsonl").is_file() and (sweep / "0" / "csv" / "metrics.csv").is_file()
    assert (sweep / "sweep_summary.csv").is_file()


def test_a_second_rename_to_the_same_name_changes_nothing(renamed):
    repo, _ = renamed
    before = _snapshot(repo)
    again = _rename(repo, NEW)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr
    assert _snapshot(repo) == before
    other = _rename(repo, "other_name")  # the first rename is not committed: the tree is dirty now
    assert other.returncode != 0 and other.stderr.startswith("error: the git tree has")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("1project", "not a valid Python package name"),
        ("my-project", "not a valid Python package name: .* \\(e.g. my_project\\)"),
        ("class", "is a Python keyword"),
        ("json", "standard library"),
        ("tests", "is a folder of the repository"),
    ],
)
def test_a_bad_name_is_refused_in_one_line(fork, name, reason):
    proc = _rename(fork, name)
    assert proc.returncode != 0
    assert len(proc.stderr.splitlines()) == 1 and re.match(rf"error: '{re.escape(name)}' .*{reason}", proc.stderr)
    assert _git("status", "--porcelain", cwd=fork) == ""  # nothing touched


def test_a_dirty_tree_is_refused_in_one_line(fork):
    readme = fork / "README.md"
    readme.write_text(readme.read_text() + "\nlocal edit\n")
    proc = _rename(fork, NEW)
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("error: the git tree has 1 uncommitted change(s) (e.g. README.md)")
    assert (fork / "src" / OLD).is_dir() and not (fork / "src" / NEW).exists()


def _installed_fork(repo: Path, venv: Path) -> Path:
    """`make install` in the renamed fork, in little: a venv that sees this environment's packages (torch and the rest
    are not installed again) with the fork's distribution installed into it, so its metadata is the new name's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    # a plain path line, not site.addsitedir: the outer .pth files are not run, so the template's own editable
    # install (src/lab and src/hydra_plugins/lab_sweepers) stays out of the fork's path, as in a fork's own venv
    Path(site, "_outer_site.pth").write_text(f"{outer}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-build-isolation"]
    installed = subprocess.run([*pip, "-e", str(repo)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


PAGE_SECTION = "## Add your own model, dataset or task"  # of docs/extending.md
BUDGET = ["tests/integration/test_budget.py", "-rs"]  # -rs: its skip is reported, so the test can read it
# a fork's first model option, named to sort before every shipped one: a test that spells the shipped list of
# options fails on it; and its first table, which only a regression learns from, so it is refused beside the default
# task: the suite composes it with what it declares it needs (`example_overrides`)
FIRST_OPTIONS = """from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from {name}.config import ConfigError, DataConfig, ModelConfig

if TYPE_CHECKING:
    from torch import nn

    from {name}.data.common import DataModule


@dataclass
class Aardvark(ModelConfig):
    \"\"\"A fork's own model: one linear layer over the flattened input.\"\"\"

    def build(self, meta: dict[str, Any]) -> nn.Module:
        from torch import nn

        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(meta["input_shape"]), meta["num_outputs"]))


@dataclass
class AardvarkRows(DataConfig):
    \"\"\"A fork's own table of values to regress.\"\"\"

    example_overrides = ("task=regression",)

    num_samples: int = 256
    target_type: str = "${{task.target_type}}"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.target_type != "value":
            raise ConfigError(f"data=aardvark_rows holds values to regress: add task=regression ({{self.target_type}})")

    def build(self) -> DataModule:
        import torch
        from torch.utils.data import TensorDataset

        from {name}.data.common import DataModule

        x = torch.randn(self.num_samples, 4, generator=torch.Generator().manual_seed(self.split_seed))
        rows = TensorDataset(x, x.sum(1))
        return DataModule(rows, rows, None, {{"input_shape": [4], "num_outputs": 1}})
"""


def _add_a_forks_options(repo: Path) -> list[str]:
    """What a fork adds first: the files of docs/extending.md's "Add your own" (as the renamed page spells them), a
    model named to sort first and a table that needs its task. Returns the paths written."""
    text = (repo / "docs" / "extending.md").read_text()
    start = text.index(PAGE_SECTION)
    section = text[start : text.index("\n## ", start + len(PAGE_SECTION))]
    files = {
        path: f"# {path}\n{body}"
        for path, body in re.findall(r"```(?:python|yaml)\n# (\S+)\n(.*?)```", section, flags=re.S)
    }
    files[f"src/{NEW}/config/aardvark.py"] = FIRST_OPTIONS.format(name=NEW)
    for path, content in files.items():
        assert not (repo / path).exists(), path
        (repo / path).write_text(content)
    return sorted(files)


@pytest.mark.longest
def test_a_renamed_forks_suite_passes_with_its_first_options_before_anything_is_committed(tmp_path):
    """What the rename advises: `make install` and `make test` in the renamed tree, not yet committed, here with the
    README's example options and a model named to sort first added, as a fork's first days add them. The fast tier
    and the template-update tests run there, so a test that spells the template's name or its shipped options, or
    one that assumes it runs in the template (the fork's `.template.json` carried into a scenario), turns this red
    here and not only in a user's fork; the template's budget test stands aside there."""
    repo = _copy(tmp_path / "fork")
    proc = _make_rename(repo, f"--no-install --python {sys.executable}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_add_a_forks_options(repo)) == 6
    python = _installed_fork(repo, tmp_path / "venv")
    # the outer run's pytest-xdist worker variables would tell the inner pytest it is a worker
    env = {k: v for k, v in _env(repo).items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    base = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "worksteal"]
    # the template's budget stands aside in a fork, which has just added its own modules
    for selection in (["-m", "not integration"], ["tests/integration/test_template_update.py", *BUDGET]):
        suite = subprocess.run([*base, *selection], cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
        assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    assert "SKIPPED" in suite.stdout and "a fork (.template.json)" in suite.stdout, suite.stdout[-2000:]
