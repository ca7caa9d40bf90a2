"""How the template installs: dependencies declared once in pyproject.toml (a core and an extra per concern), pinned
by the lock (requirements.txt), installed by the Makefile, the same in the CI workflow and the container; an option
needing a missing extra is refused naming it (lab.extras)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from dataclasses import dataclass

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from tests.helpers import REPO, compose_config

from lab import extras
from lab.config import options, validate
from lab.errors import ConfigError
from lab.models.options import CNNConfig

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def lock() -> dict[str, str]:
    """requirements.txt: {canonical name: pinned version}."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if line and not line.startswith((" ", "#", "-")):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_declared_dependency_is_pinned_by_the_lock_within_its_range() -> None:
    pins = lock()
    declared = [*PROJECT["dependencies"], *(r for deps in PROJECT["optional-dependencies"].values() for r in deps)]
    for line in declared:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is declared in pyproject.toml but not pinned in requirements.txt: make lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name], line)


def test_the_makefile_installs_every_extra_by_default() -> None:
    listed = re.search(r"^ALL_EXTRAS := (\S+)$", (REPO / "Makefile").read_text(), flags=re.M)
    assert listed is not None
    assert set(listed.group(1).split(",")) == set(PROJECT["optional-dependencies"])


def test_the_installed_metadata_knows_the_extras_of_pyproject() -> None:
    """lab.extras reads the extras from the installed project: a stale install (pyproject changed since) shows."""
    declared = {
        extra: {canonicalize_name(Requirement(line).name) for line in deps}
        for extra, deps in PROJECT["optional-dependencies"].items()
    }
    assert {extra: set(dists) for extra, dists in extras.extras().items()} == declared


def test_an_options_requirements_come_from_an_extra_not_the_core() -> None:
    core = {canonicalize_name(Requirement(line).name) for line in PROJECT["dependencies"]}
    needing = [cls for group in options.groups() for cls in options.options(group).values() if cls.requires]
    for cls in needing:  # the extensions' options (model=timm, logger=mlflow, ...): the core's need nothing more
        for dist in cls.requires:
            assert canonicalize_name(dist) not in core, (cls, dist)
            assert extras.extra_of(dist), f"{cls.__name__} requires {dist}, which no extra of pyproject.toml brings"


@dataclass
class _Needing(CNNConfig, abstract=True):
    """A model option that needs a distribution of an extra, as an extension's may (each tests its own)."""

    requires = ("onnx",)  # the export extra's


def test_an_option_whose_extra_is_missing_is_refused_naming_the_extra(without) -> None:
    _Needing()  # installed here: accepted
    without(*_Needing.requires)
    with pytest.raises(ConfigError) as caught:
        _Needing()
    message = str(caught.value)
    what = re.match(r"(\w+)=(\w+) needs ", message)  # the option chosen: model=timm, logger=mlflow, ...
    assert what is not None and what.group(1) == "model" and f" needs {_Needing.requires[0]}" in message, message
    # the fix keeps the extras already installed (`make install EXTRAS=` is the whole choice)
    assert re.search(r"make install EXTRAS=\S*\bexport\b", message) and "-e '.[export]'" in message, message
    assert "dev" in message.split("EXTRAS=")[1].split(" ")[0].split(","), message


def test_onnx_export_and_inference_need_the_export_extra(without) -> None:
    export = compose_config(["ckpt_path=/some/best.pt"], config_name="export")
    infer = compose_config(["ckpt_path=/some/model.onnx", "input=x.png"], config_name="infer")
    validate(export), validate(infer)
    without("onnx", "onnxscript", "onnxruntime")
    with pytest.raises(ConfigError, match=r"export.formats=onnx needs onnx, onnxscript, onnxruntime.*EXTRAS=\S*export"):
        validate(export)
    with pytest.raises(ConfigError, match=r"or export.formats=\[pt2\]"):
        validate(export)
    validate(compose_config(["ckpt_path=/some/best.pt", "export.formats=[pt2]"], config_name="export"))
    with pytest.raises(ConfigError, match=r"ONNX ckpt_path needs onnxruntime.*or the model.pt2"):
        validate(infer)


def test_a_package_no_extra_brings_is_named_itself() -> None:
    assert extras.install_hint(["no-such-dist"]) == "pip install -c requirements.txt no-such-dist"


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), flags=re.M))


def test_the_workflow_runs_the_matrix_pyproject_claims() -> None:
    """The fast tier on requires-python's lowest and highest minor version, the whole suite on the lock's Python."""
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    low, high = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", PROJECT["requires-python"]).groups()
    matrix = re.search(r"python: \[(.*?)\]", workflow)
    assert matrix is not None and matrix.group(1).replace('"', "").split(", ") == [f"3.{low}", f"3.{int(high) - 1}"]
    lock_python = re.search(
        r"autogenerated by pip-compile with Python (3\.\d+)", (REPO / "requirements.txt").read_text()
    )
    assert lock_python is not None and f'python-version: "{lock_python.group(1)}"' in workflow
    assert "run: .ci/run" in workflow and "TORCH: cpu" in workflow
    for target in re.findall(r"run: make (\S+)", workflow):
        assert target in make_targets(), target


def test_the_container_installs_through_the_makefile_with_every_extra() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    extras_arg = re.search(r"^ARG EXTRAS=(\S+)$", dockerfile, flags=re.M)
    assert extras_arg is not None and set(extras_arg.group(1).split(",")) == set(PROJECT["optional-dependencies"])
    assert re.search(r'make install TORCH="\$TORCH" EXTRAS="\$EXTRAS"', dockerfile)
    for command in re.findall(r"^#\s+(?:docker|apptainer) run .*?lab(?::cpu)? (.+)$", dockerfile, flags=re.M):
        if command.startswith("make "):
            assert command.split()[1] in make_targets(), command
        else:
            assert (REPO / command.split()[1]).is_file(), command
    definition = (REPO / "container" / "apptainer.def").read_text()
    assert "From: lab:latest" in definition and "docker build -t lab ." in definition
    assert "docker build -t lab ." in dockerfile


def test_the_install_page_matches_the_makefile_and_pyproject() -> None:
    """docs/install.md: each make command is a target given only variables the Makefile reads, the extras table lists
    pyproject's extras with what they bring; docs/distributed.md's *Containers*: the commands name files that exist."""
    clusters = (REPO / "docs" / "distributed.md").read_text()
    section = (REPO / "docs" / "install.md").read_text() + clusters[clusters.index("\n## Containers\n") :]
    makefile = (REPO / "Makefile").read_text()
    commands = [
        line.split("  #")[0].strip()
        for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S)
        for line in block.splitlines()
    ]
    for command in filter(lambda c: c.startswith("make "), commands):
        target, *assignments = command.split()[1:]
        assert target in make_targets(), command
        for name in (a.split("=")[0] for a in assignments):
            assert re.search(rf"^{name} \?=", makefile, flags=re.M), f"{command}: the Makefile reads no {name}"
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section, flags=re.M))
    assert set(rows) == set(PROJECT["optional-dependencies"])
    for extra, deps in PROJECT["optional-dependencies"].items():
        for dist in (Requirement(line).name for line in deps):
            assert dist in rows[extra], f"docs/install.md's extras table: {extra} brings {dist}"
    assert "docker build -t lab ." in commands and "apptainer build lab.sif container/apptainer.def" in commands
    assert all((REPO / c.split()[-1]).is_file() for c in commands if c.startswith("apptainer build"))
    assert f'requires-python = "{PROJECT["requires-python"]}"' in section


@pytest.mark.integration  # runs git
def test_gitignore_hides_a_venv_that_is_a_symlink(tmp_path) -> None:
    """`make install` may find .venv as a link to a venv elsewhere (a shared disk): git must not offer it to commit.
    `.venv/` (a directory pattern) does not match a symlink, which git sees as a file."""
    repo = tmp_path / "fork"
    repo.mkdir()
    (repo / ".gitignore").write_text((REPO / ".gitignore").read_text())
    (tmp_path / "elsewhere").mkdir()
    (repo / ".venv").symlink_to(tmp_path / "elsewhere")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    assert status.stdout.splitlines() == ["?? .gitignore"]
