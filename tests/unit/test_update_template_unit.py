"""scripts/update_template.py's pure parts: which release tag `make update` takes by default, the version read from
a pyproject.toml, and the record `make rename` writes, which no later rename rewrites (the git flow itself runs in
tests/integration/test_template_update.py)."""

from __future__ import annotations

import json
import re

import pytest

from helpers import REPO, load_file

OLD = re.search(r'^name\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), flags=re.M).group(1)


update = load_file(REPO / "scripts" / "update_template.py")


@pytest.mark.parametrize(
    ("tags", "newest"),
    [
        (["v0.9.0", "v0.10.0", "v0.2.3"], "v0.10.0"),  # by number, not by text
        (["v1.0.0", "v1.0.0-rc1", "v2.0", "release-3", "2.0.0", "v1.0.1x"], "v1.0.0"),  # vX.Y.Z only
        (["v0.1.0", "v0.1.1", "v0.1.10", "v0.1.9"], "v0.1.10"),
        ([], None),
        (["main", "v1"], None),
    ],
)
def test_the_default_version_is_the_newest_release_tag(tags, newest):
    assert update.newest_release(tags) == newest


def test_the_upstreams_tags_are_kept_apart_from_the_forks_own():
    assert not update.tags_namespace("upstream").startswith("refs/tags/")
    assert update.tags_namespace("upstream") != update.tags_namespace("other")


def test_the_version_is_the_project_tables():
    text = '[build-system]\nversion = "9"\n\n[project]\nname = "x"\nversion = "0.3.1"\n\n[tool.x]\nversion = "7"\n'
    assert update.rename.current_version(text) == "0.3.1"
    assert update.rename.current_version('[project]\nname = "x"\n') == ""
    assert update.rename.current_version((REPO / "pyproject.toml").read_text()) != ""


def test_the_record_survives_a_rename():
    """It names a commit and a version, no package: a later `make rename` (which rewrites every mention of the
    package's name in the repository) leaves it as it is."""
    text = update.rename.record_text("0123456789abcdef" * 2 + "01234567", "0.1.0")
    assert json.loads(text) == {"commit": "0123456789abcdef" * 2 + "01234567", "version": "0.1.0"}
    assert update.rename.replacer(OLD, "myproject")(text) == text
    assert update.rename.replacer("myproject", "other")(text) == text
