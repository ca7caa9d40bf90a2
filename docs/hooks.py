"""mkdocs hooks. The site's home page is the README and each extension's page is the README.md of its own folder,
read where they are at build time (mkdocs reads only docs/), so nothing is copied by hand and a dropped extension
drops its page. Links that leave docs/ are rewritten for the site: to the home page, to an extension's page, or to
plain text for a source file (the site holds no source)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
EXTENSIONS = ROOT / "src" / "lab" / "extensions"
# [text](target): a relative target, not a URL or an anchor of the same page
LINK = re.compile(r"\[([^\]]*)\]\((?![a-z]+:|#)([^)\s]+)\)")
MARKER = "<!-- extension pages -->"


def _extension_pages() -> dict[str, Path]:
    """Site path -> page, for each extension present."""
    return {f"extensions/{page.parent.name}.md": page for page in sorted(EXTENSIONS.glob("*/README.md"))}


def _site_path(path: Path) -> str | None:
    """Where a repository file is in the site, or None when the site does not hold it."""
    if path == ROOT / "README.md":
        return "index.md"
    if path.is_relative_to(ROOT / "docs"):
        return path.relative_to(ROOT / "docs").as_posix()
    pages = {page: uri for uri, page in _extension_pages().items()}
    return pages.get(path)


def on_config(config: Any) -> Any:
    # each extension's page goes into the nav after the list of them
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Extensions" in entry:
            entry["Extensions"] += [{page.parent.name: uri} for uri, page in _extension_pages().items()]
    return config


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / "README.md")))
    for uri, page in _extension_pages().items():
        files.append(File.generated(config, uri, abs_src_path=str(page)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    source = Path(page.file.abs_src_path)
    here = os.path.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        text, target = match.groups()
        path, _, anchor = target.partition("#")
        uri = _site_path((source.parent / path).resolve()) if path else None
        if path and uri is None:
            return text  # a source file: named, not linked
        if uri is None:
            return match.group(0)
        return f"[{text}]({os.path.relpath(uri, here or '.')}{'#' + anchor if anchor else ''})"

    markdown = LINK.sub(rewrite, markdown)
    if MARKER in markdown:
        rows = []
        for uri, extension in _extension_pages().items():
            title = extension.read_text().splitlines()[0].lstrip("# ").split(": ", 1)[-1]
            rows.append(f"- [{extension.parent.name}]({os.path.relpath(uri, here or '.')}): {title}")
        markdown = markdown.replace(MARKER, "\n".join(rows))
    return markdown
