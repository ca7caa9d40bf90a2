"""The data commands of the page (README.md here) end to end, as a user runs them: on a CSV the test writes,
prepare_data.py into Arrow parts, then a short regression run; the memory benchmark at its shortest settings; the
text commands on files and an offline hub cache the test writes, with the test-only model=token_bag in place of
model=hf (whose weights this machine cannot fetch)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from helpers import plugins_env, run_script, script_env
from lab.extensions.hf.tests.tiny import WORDS, hub_cache, tokenizer_dir, write_jsonl
from warm_python import run_python

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "README.md"
# the page's table commands, line by line (tests/integration/test_readme.py: each sh line is quoted by a test here)
SHOWN = [
    "python scripts/prepare_data.py data=hf data.source=/data/big.csv data.path=/data/big-arrow",
    "python scripts/train.py data=hf data.source=/data/big.csv data.path=/data/big-arrow data.target=price task=regression model=mlp",  # noqa: E501
]
TEXT = [
    "python scripts/train.py model=hf model.name_or_path=/models/bert-mini data=hf data.data_files=/data/reviews.jsonl data.text_column=text data.label_column=label",  # noqa: E501
    "python scripts/train.py model=hf model.name_or_path=/models/tiny-llama task=language_model data=hf data.dataset=roneneldan/TinyStories data.text_column=text data.block_size=256",  # noqa: E501
    "python scripts/train.py model=hf model.name_or_path=/models/tiny-llama task=language_model data=hf data.data_files=/data/pairs.csv data.prompt_column=question data.response_column=answer",  # noqa: E501
    "python scripts/train.py model=hf model.name_or_path=/models/tiny-llama task=language_model data=hf data.data_files=/data/corpus.jsonl data.text_column=text data.streaming=true data.examples_per_epoch=100000 data.num_workers=2 data.stream_shards=2",  # noqa: E501
]
BAG = "import lab.extensions.hf.tests.integration.token_bag\n"  # model=token_bag, the test-only model
BENCH = "python -m lab.extensions.hf.bench_table_memory"
QUICK = "--base-mb 0.2 --scales 1,2 --repeats 1"  # 0.2 and 0.4 MB of CSV


def _page_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_pages_table_commands_prepare_and_train(tmp_path: Path) -> None:
    lines = _page_lines()
    assert all(command in lines for command in [*SHOWN, *TEXT, BENCH])
    x = np.random.default_rng(0).normal(size=(200, 2))
    (tmp_path / "big.csv").write_text("x0,x1,price\n" + "".join(f"{a:.4f},{b:.4f},{3 * a - b:.4f}\n" for a, b in x))
    places = {"/data/big.csv": str(tmp_path / "big.csv"), "/data/big-arrow": str(tmp_path / "big-arrow")}
    for command in SHOWN:
        for placeholder, path in places.items():
            command = command.replace(placeholder, path)
        args = [*shlex.split(command)[2:], "data.batch_size=16", "data.rows_per_part=64"]
        if "train.py" in command:
            args += ["trainer.max_epochs=1", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
        proc = run_script(shlex.split(command)[1].removeprefix("scripts/"), *args)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
    assert json.loads((tmp_path / "big-arrow" / "manifest.json").read_text())["info"]["rows"] == 200
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_the_memory_benchmark_runs(tmp_path: Path) -> None:
    args = [*shlex.split(BENCH)[1:], *shlex.split(QUICK)]
    proc = run_python(args, cwd=tmp_path, env=script_env(), timeout=300)
    assert proc.returncode == 0, f"{BENCH}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def test_the_pages_text_commands_train(tmp_path: Path) -> None:
    texts = [" ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(2 + i % 4)) for i in range(60)]
    write_jsonl(tmp_path / "reviews.jsonl", [{"text": t, "label": ["neg", "pos"][i % 2]} for i, t in enumerate(texts)])
    write_jsonl(tmp_path / "corpus.jsonl", [{"text": t} for t in texts])
    (tmp_path / "pairs.csv").write_text("question,answer\n" + "".join(f"{t},{t}\n" for t in texts))
    hub_cache(tmp_path / "hub", "roneneldan/TinyStories", [{"text": t} for t in texts])
    tokenizer_dir(tmp_path / "tok")
    env = plugins_env() | {
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "hub"),
    }
    shorter = {
        "data.block_size=256": "data.block_size=8",
        "data.examples_per_epoch=100000": "data.examples_per_epoch=64",
    }
    for n, command in enumerate(TEXT):
        for placeholder, there in {"/data/": f"{tmp_path}/", **shorter}.items():
            command = command.replace(placeholder, there)
        args = [a for a in shlex.split(command)[2:] if not a.startswith("model")]
        args += ["model=token_bag", f"data.tokenizer={tmp_path / 'tok'}", "data.batch_size=4", "data.eval_examples=8"]
        args += ["data.block_size=8"]  # a short corpus
        args += ["trainer.max_epochs=1", "logger=none", f"hydra.run.dir={tmp_path / f'run{n}'}"]
        proc = run_script("train.py", *args, patch=BAG, env=env)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
        assert json.loads((tmp_path / f"run{n}" / "summary.json").read_text())["status"] == "completed"
