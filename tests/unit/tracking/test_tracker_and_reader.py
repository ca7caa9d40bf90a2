"""The wandb offline-file reader the tracking tests rely on, and the logger's mode decisions."""

from __future__ import annotations

import pytest
import wandb
from omegaconf import OmegaConf

from lab.config.trackers import logger_config
from lab.tracking import Tracker
from lab.tracking.options import WandbConfig
from lab.tracking.wandb_backend import has_wandb_credentials, resolve_mode
from wandb_reader import BLOCK, CorruptRunFile, find_run_files, read_payloads, read_run


@pytest.fixture
def no_wandb_env(monkeypatch, tmp_path):
    for key in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # an empty, private netrc


def _offline_run(tmp_path, config):
    run = wandb.init(
        mode="offline",
        dir=tmp_path,
        project="p",
        group="g",
        job_type="train",
        name="n",
        tags=["t"],
        config=config,
        settings=wandb.Settings(console="off", silent=True),
    )
    for step in (10, 20, 30):
        run.log({"train/loss": 1 / step, "epoch": step // 10}, step=step)
    run.summary["val/acc_best"] = 0.5
    run.finish()
    # finish() can return before wandb-core has written the last partial block of the run file
    # (seen on a loaded CI machine: the file stopped at exactly 2 * BLOCK); teardown waits for it.
    wandb.teardown()
    (path,) = find_run_files(tmp_path)
    return path


@pytest.mark.integration  # starts wandb's processes
def test_reader_returns_config_history_summary(tmp_path):
    run = read_run(_offline_run(tmp_path, {"model": {"hidden_dims": [3, 4]}, "lr": 0.1}))
    assert (run.name, run.group, run.job_type, run.tags) == ("n", "g", "train", ["t"])
    assert run.config["model"] == {"hidden_dims": [3, 4]} and run.config["lr"] == 0.1
    assert [row["_step"] for row in run.history] == [10, 20, 30]
    assert [row["train/loss"] for row in run.history] == pytest.approx([0.1, 0.05, 1 / 30])
    assert run.summary["val/acc_best"] == 0.5 and run.exit_code == 0


@pytest.mark.integration  # starts wandb's processes
def test_reader_joins_records_that_span_blocks_and_rejects_corruption(tmp_path):
    big = {f"key_{i}": "x" * 100 for i in range(800)}  # ~90 KB of config: FIRST/MIDDLE/LAST records
    path = _offline_run(tmp_path, big)
    assert path.stat().st_size > 2 * BLOCK
    assert read_run(path).config["key_799"] == "x" * 100
    data = bytearray(path.read_bytes())
    data[BLOCK + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRunFile, match="checksum"):
        read_payloads(path)


def test_reader_rejects_other_files(tmp_path):
    (tmp_path / "run-x.wandb").write_bytes(b"not a run file")
    with pytest.raises(CorruptRunFile, match="not a wandb run file"):
        read_payloads(tmp_path / "run-x.wandb")


def test_mode_auto_follows_wandb_mode_then_credentials(no_wandb_env, monkeypatch, tmp_path):
    assert resolve_mode("auto") == "offline"
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    (tmp_path / "netrc").chmod(0o600)
    assert has_wandb_credentials() and resolve_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert resolve_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode("auto") == "disabled"
    assert resolve_mode("offline") == "offline"  # an explicit choice wins


def test_api_key_counts_as_credentials(no_wandb_env, monkeypatch):
    assert not has_wandb_credentials()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert has_wandb_credentials()


@pytest.mark.integration  # starts wandb's processes
def test_only_rank_zero_writes(no_wandb_env, tmp_path):
    logger = OmegaConf.structured(logger_config(backends={"wandb": True}, wandb=WandbConfig(mode="offline")))
    for rank in (1, 0):
        tracker = Tracker(tmp_path / f"rank{rank}", logger_cfg=logger, rank=rank).start()
        tracker.log({"train/loss": 1.0}, step=1)
        tracker.finish()
    assert not (tmp_path / "rank1").exists()
    assert (tmp_path / "rank0" / "metrics.jsonl").is_file() and find_run_files(tmp_path / "rank0")
