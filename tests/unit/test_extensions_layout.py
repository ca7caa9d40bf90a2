"""Each extension is one folder the core never names (src/lab/extensions/__init__.py says what it holds): what
tests/integration/test_extensions.py then proves by dropping them, checked here on the files alone."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from helpers import REPO
from lab import extensions, extras

EXTENSIONS = REPO / "src" / "lab" / "extensions"
# where the core would name an extension: its code, tests, configs, commands and the Makefile (docs/ and the
# CHANGELOG tell the story of every folder, dropped or not)
CORE_FOLDERS = ("src", "tests", "conf", "scripts", "bench")
CORE_FILES = ("Makefile", "README.md", "pyproject.toml")
TEXT = (".py", ".yaml", ".md", ".toml", ".txt", ".cfg")


def _built(path: Path) -> bool:
    """What an install or a run wrote (pip's file list in *.egg-info names every extension) is not source."""
    return any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)


def outside(name: str) -> list[Path]:
    folder = EXTENSIONS / name
    found = [REPO / f for f in CORE_FILES]
    for top in CORE_FOLDERS:
        found += [p for p in (REPO / top).rglob("*") if p.suffix in TEXT and not _built(p)]
    return [path for path in found if path.is_file() and folder not in path.parents]


@pytest.mark.parametrize("name", extensions.names())
def test_an_extension_is_named_only_in_its_own_folder(name):
    mention = re.compile(rf"extensions[./]{name}\b")
    named = [str(p.relative_to(REPO)) for p in outside(name) if mention.search(p.read_text(errors="replace"))]
    assert not named, f"{', '.join(named)} name(s) the {name} extension: dropping it would break them"


@pytest.mark.parametrize("name", extensions.names())
def test_an_extension_declares_its_extras_and_has_a_page_and_tests(name):
    folder = EXTENSIONS / name
    declared = importlib.import_module(f"lab.extensions.{name}").EXTRAS
    assert isinstance(declared, tuple) and set(declared) <= set(extras.extras()), (name, declared)
    assert (folder / "README.md").is_file() and f"make drop EXT={name}" in (folder / "README.md").read_text()
    assert list((folder / "tests").rglob("test_*.py")), f"{name} has no tests"


@pytest.mark.parametrize("name", extensions.names())
def test_an_extension_imports_the_core_only_and_its_options_no_torch(name):
    folder = EXTENSIONS / name
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                for module in modules:
                    other = re.match(r"lab\.extensions\.(\w+)", module)
                    assert not other or other.group(1) == name, f"{path}: imports the {other.group(1)} extension"
    options = folder / "options.py"
    if options.is_file():  # imported at every start, before torch: an option's build() imports its code
        top = [n for n in ast.parse(options.read_text()).body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = [getattr(n, "module", None) or n.names[0].name for n in top]
        assert not [m for m in names if m.split(".")[0] == "torch"], f"{options} imports torch at the top"
