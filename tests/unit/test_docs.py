"""The README stays a front page (short, with its table of contents) and the pages it links stay whole: every page of
docs/ is in the site's nav and linked from the README, and every repository path the pages name exists."""

from __future__ import annotations

import re

import yaml

from helpers import REPO, core_pages, extensions_listed

README = REPO / "README.md"
# paths a page names that are not in this repository on purpose: what a fork or the Add-your-own example creates
# and this machine's own config, which git ignores
NEW_FILES = ("myproject", "<", "gated_mlp", "bits.py", "multilabel.py", "stop_at.py", "wide_cnn", "local/default")


def _anchor(heading: str) -> str:
    """The id mkdocs (Python-Markdown's toc) gives a heading."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading.lower())).strip("-")


def test_the_readme_is_short_and_opens_with_its_contents():
    text = README.read_text()
    assert len(text.splitlines()) <= 350, "README.md is over 350 lines: move a section to a page of docs/"
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    contents = text[text.index("## Contents\n") : text.index("\n## ", text.index("## Contents\n"))]
    linked = re.findall(r"^- \[[^\]]+\]\(#([^)]+)\)$", contents, flags=re.M)
    assert linked == [_anchor(h) for h in headings if h != "Contents"], "the README's Contents list its sections"


def test_every_page_is_in_the_nav_and_linked_from_the_readme():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = yaml.safe_dump(config["nav"])
    readme = README.read_text()
    for page in core_pages()[1:]:
        assert page.name in nav, f"mkdocs.yml's nav has no {page.name}"
        assert f"](docs/{page.name})" in readme, f"README.md links no docs/{page.name}"


def _dropped(path: str) -> bool:
    """Whether `path` is in a folder of the template's extensions that this tree dropped (`make drop`)."""
    match = re.match(r"src/lab/extensions/(\w+)/", path)
    return match is not None and match.group(1) in extensions_listed() and not (REPO / match.group(0)).is_dir()


def test_every_repository_path_a_page_names_exists():
    pattern = re.compile(r"`((?:src|conf|scripts|bench|tests|container|docs)/[\w./<>-]*)`")
    missing = [
        f"{page.name}: {path}"
        for page in core_pages()
        for path in pattern.findall(page.read_text())
        if not any(part in path for part in NEW_FILES) and not (REPO / path).exists() and not _dropped(path)
    ]
    assert not missing, f"the pages name paths that do not exist: {missing}"
    assert not _dropped("src/lab/extensions/reprot/page.py"), "a misspelt extension is no dropped one"
