"""`make docs`: the site builds in strict mode (a broken link, a missing page or anchor fails it), with the README as
its home page, each present extension's page, the API page and the search index that works from file://."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from helpers import REPO, extension_pages

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the dev extra brings it)"
    ),
]


def test_the_site_builds_in_strict_mode(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Quick start" in (site / "index.html").read_text()
    for page in extension_pages():
        assert (site / "extensions" / f"{page.parent.name}.html").is_file(), page
    assert "lab.tasks.base.Task" in (site / "api.html").read_text()
    assert (site / "search" / "search_index.js").is_file()  # the offline plugin's index: search with no server
