"""The page's (README.md here) first commands end to end, as a user runs them (on an image folder and a CSV the test
writes): prepare_data.py, a run, --verify; a run with loader workers and random augmentation killed by SIGKILL
mid-epoch, then resumed: the same weights as a run never interrupted; shards on a server."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import plugins_env, run_script

PAGE = Path(__file__).resolve().parents[2] / "README.md"
# the page's first sh block, line by line (tests/integration/test_readme.py: each is quoted by a test of this folder)
SHOWN = [
    "python scripts/prepare_data.py data=shards data.source=/data/images data.path=/data/images-shards",
    "python scripts/train.py data=shards data.path=/data/images-shards data.num_workers=8",
    "python scripts/prepare_data.py data=shards data.path=/data/images-shards --verify",
]


def write_images(root):
    rng = np.random.default_rng(0)
    for split, n in (("train", 7), ("val", 2)):
        for name in ("a", "b", "c"):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)).save(root / split / name / f"{i}.png")
    return root


def page_commands() -> list[str]:
    """The commands of the page's first sh block."""
    block = re.search(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S).group(1)
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == SHOWN
    return commands


@pytest.fixture(scope="module")
def prepared_shards(tmp_path_factory):
    """The page's commands as written, on data of this test's (an image folder): prepare, train (a short run),
    verify. Returns the image folder and its shards."""
    root = tmp_path_factory.mktemp("big_data")
    images, shards = write_images(root / "images"), root / "shards"
    places = {"/data/images-shards": shards, "/data/images": images}
    quick = {  # a short run on the test's small data, each option's own keys
        "data=shards": ["data.image_size=8", "data.batch_size=4", "model=mlp", "data.samples_per_shard=4"],
    }
    for n, command in enumerate(page_commands()):
        for placeholder, path in places.items():
            command = command.replace(placeholder, str(path))
        args = [a.replace("data.num_workers=8", "data.num_workers=2") for a in shlex.split(command)]  # 2 cores
        if "--verify" not in args:
            args += quick[next(a for a in args if a.startswith("data="))]
        if args[1] == "scripts/train.py":
            args += ["trainer.max_epochs=1", "logger=none", f"hydra.run.dir={root / f'run{n}'}"]
        proc = run_script(args[1].removeprefix("scripts/"), *args[2:])
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
        if "--verify" in args:
            assert "every part matches its checksum" in proc.stderr
        if args[1] == "scripts/train.py":
            assert json.loads((root / f"run{n}" / "summary.json").read_text())["status"] == "completed"
    return images, shards


@pytest.fixture(params=["shards", "tokens"])
def streamed(request) -> list[str]:
    """Training overrides on prepared data with two loader workers: image shards with RandAugment (21 images in
    batches of 4: 5 steps an epoch), or BPE token files under a tiny GPT (4 steps an epoch)."""
    if request.param == "shards":
        images, shards = request.getfixturevalue("prepared_shards")
        return [
            *("data=shards", f"data.path={shards}", f"data.source={images}", "data.image_size=8"),
            *("data.batch_size=4", "data.auto_augment=randaugment", "model=mlp"),
        ]
    tiny_gpt = ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "data.block_size=16"]
    return ["experiment=bpe_lm", *request.getfixturevalue("prepared_tokens"), *tiny_gpt]


def test_a_run_killed_mid_epoch_resumes_to_identical_weights(streamed, tmp_path):
    # a checkpoint every 2 steps; SIGKILL when step 7 ends (epoch 2): the last checkpoint is step 6's, mid-epoch
    train = [*streamed, "data.num_workers=2", "trainer.max_epochs=2", "trainer.ckpt_every_n_steps=2", "logger=none"]
    straight = run_script("train.py", *train, f"hydra.run.dir={tmp_path / 'straight'}")
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = tmp_path / "killed"
    kill = "+callbacks.kill_at_step={step:7}"
    proc = run_script("train.py", *train, kill, f"hydra.run.dir={killed}", env=plugins_env())
    assert proc.returncode == -9, proc.stderr[-3000:]
    snapshot = torch.load(killed / "checkpoints/last.pt", weights_only=True)["progress"]
    assert snapshot["global_step"] == 6 and snapshot["batch_in_epoch"] > 0
    resumed = run_script("train.py", *train, f"resume={killed}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = torch.load(tmp_path / "straight/checkpoints/last.pt", weights_only=True)
    b = torch.load(killed / "checkpoints/last.pt", weights_only=True)
    assert a["progress"] == b["progress"]
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key


def test_shards_on_a_server_are_fetched_once_into_the_cache_and_checked(tmp_path):
    """data.path=http://...: wids fetches each shard with curl into data.cache_dir on first use; a shard that comes
    back short (here: the server's copy was cut) is fetched again once, then refused in one line."""
    import functools
    import http.server
    import threading

    from lab.config import options
    from lab.errors import UserError
    from lab.extensions.big_data import shards

    served = tmp_path / "served"
    samples = [(np.full((2,), i, dtype=np.float32), i % 2) for i in range(12)]
    shards.prepare_tensors(served, {"train": samples, "val": samples[:4]}, ["even", "odd"], per_shard=4)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cfg = {"name": "shards", "path": url, "cache_dir": str(tmp_path / "cache")}
        module = options.instantiate("data", cfg).build()
        assert [int(module.train[i][0][0]) for i in range(12)] == list(range(12))
        cached = sorted(p.name for p in (tmp_path / "cache").rglob("*.tar"))
        assert cached == ["train-000000.tar", "train-000001.tar", "train-000002.tar"]
        (served / "val-000000.tar").write_bytes((served / "val-000000.tar").read_bytes()[:1000])
        with pytest.raises(UserError, match=r"is damaged: val-000000.tar has 1000 bytes, the manifest says \d+"):
            options.instantiate("data", cfg).build().val[0]
    finally:
        server.shutdown()
