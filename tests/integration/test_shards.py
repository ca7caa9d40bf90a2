"""data=shards end to end, as a user runs it: prepare_data.py from an image folder, training with loader workers and
random augmentation killed by SIGKILL mid-epoch, then resumed: the same weights as a run never interrupted."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import plugins_env, run_script


def write_images(root):
    rng = np.random.default_rng(0)
    for split, n in (("train", 7), ("val", 2)):
        for name in ("a", "b", "c"):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)).save(root / split / name / f"{i}.png")
    return root


def test_a_run_on_shards_killed_mid_epoch_resumes_to_identical_weights(tmp_path):
    images, shards = write_images(tmp_path / "images"), tmp_path / "shards"
    prepare = ["data=shards", f"data.source={images}", f"data.path={shards}", "data.samples_per_shard=4"]
    done = run_script("prepare_data.py", *prepare)
    assert done.returncode == 0, done.stderr
    assert "prepared" in done.stderr and (shards / "manifest.json").is_file()
    # 21 images in batches of 4: 5 steps an epoch, a checkpoint every 2; the kill ends step 7 (epoch 2, batch 2),
    # the last checkpoint is step 6's
    train = [
        *prepare,
        "data.image_size=8",
        "data.batch_size=4",
        "data.num_workers=2",
        "data.auto_augment=randaugment",
        "model=mlp",
        "trainer.max_epochs=2",
        "trainer.ckpt_every_n_steps=2",
        "logger=none",
    ]
    straight = run_script("train.py", *train, f"hydra.run.dir={tmp_path / 'straight'}")
    assert straight.returncode == 0, straight.stderr
    killed = tmp_path / "killed"
    kill = "+callbacks.kill={_target_:kill_at_step.KillAtStep,step:7}"
    proc = run_script("train.py", *train, kill, f"hydra.run.dir={killed}", env=plugins_env())
    assert proc.returncode == -9, proc.stderr
    assert torch.load(killed / "checkpoints/last.pt", weights_only=True)["progress"]["global_step"] == 6
    resumed = run_script("train.py", *train, f"resume={killed}")
    assert resumed.returncode == 0, resumed.stderr
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
    from lab.data import shards
    from lab.errors import UserError

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
