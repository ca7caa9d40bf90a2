"""data.streaming=true resumes exactly: a run on a streamed corpus with two loader workers, killed by SIGKILL
mid-epoch and continued by resume=auto, ends with the weights of a run never interrupted (bitwise)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import plugins_env, run_script
from lab.extensions.hf.tests.tiny import WORDS, tokenizer_dir

pytestmark = pytest.mark.slow

BAG = "import lab.extensions.hf.tests.integration.token_bag\n"  # model=token_bag, the test-only model


def test_a_streamed_run_killed_mid_epoch_resumes_to_identical_weights(tmp_path: Path) -> None:
    texts = [" ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(2 + i % 6)) for i in range(300)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tokenizer_dir(tmp_path / "tok")
    train = [
        *(
            "data=hf",
            f"data.data_files={tmp_path / 'c.jsonl'}",
            "data.text_column=text",
            f"data.tokenizer={tmp_path / 'tok'}",
        ),
        *("data.streaming=true", "data.examples_per_epoch=48", "data.eval_examples=20", "data.stream_shards=2"),
        *("data.block_size=6", "data.batch_size=4", "data.num_workers=2", f"data.cache_dir={tmp_path / 'cache'}"),
        *("task=language_model", "model=token_bag", "trainer.max_epochs=2", "trainer.ckpt_every_n_steps=2"),
        "logger=none",
    ]
    env = plugins_env()
    straight = run_script("train.py", *train, f"hydra.run.dir={tmp_path / 'straight'}", patch=BAG, env=env)
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = tmp_path / "killed"
    # 12 batches an epoch; SIGKILL when step 17 ends: the last checkpoint is step 16's, batch 4 of epoch 2
    proc = run_script(
        "train.py", *train, "+callbacks.kill_at_step={step:17}", f"hydra.run.dir={killed}", patch=BAG, env=env
    )
    assert proc.returncode == -9, proc.stderr[-3000:]
    snapshot = torch.load(killed / "checkpoints/last.pt", weights_only=True)["progress"]
    assert snapshot["global_step"] == 16 and snapshot["batch_in_epoch"] == 4
    resumed = run_script("train.py", *train, "resume=auto", f"hydra.run.dir={killed}", patch=BAG, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = torch.load(tmp_path / "straight/checkpoints/last.pt", weights_only=True)
    b = torch.load(killed / "checkpoints/last.pt", weights_only=True)
    assert a["progress"] == b["progress"] and a["progress"]["global_step"] == 24
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
