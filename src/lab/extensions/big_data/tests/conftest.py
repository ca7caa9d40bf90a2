"""Fixtures of this extension's tests (the suite's own come through src/lab/extensions/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import made_once, run_script


@pytest.fixture(scope="session")
def prepared_tokens(shared_dir) -> list[str]:
    """data=tokens on a small corpus (8 KB of Python source), prepared once by scripts/prepare_data.py into several
    token files: the overrides that train on it."""
    import sysconfig

    root = shared_dir / "tokens"
    root.mkdir(exist_ok=True)  # made_once's lock lives next to what it makes
    overrides = [
        "data=tokens",
        f"data.source={root / 'corpus.txt'}",
        f"data.path={root / 'prepared'}",
        "data.vocab_size=320",
        "data.shard_mb=0.003",  # 3 KB of text per token file: windows that span two files
    ]

    def make() -> None:
        (root / "corpus.txt").write_text((Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text()[:8000])
        proc = run_script("prepare_data.py", *overrides)
        assert proc.returncode == 0, proc.stderr[-3000:]

    made_once(root / "prepared", make)
    return overrides
