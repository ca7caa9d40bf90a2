"""The training CLI end to end: accuracy, equivalences (accumulation, resume, seeding), precision, failures."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
import torch

from helpers import REPO, Run, max_abs_diff, run_script

pytestmark = pytest.mark.slow

METRIC_KEYS = {"train/loss", "train/lr", "train/grad_norm", "train/throughput", "train/data_wait", "train/mem_peak_mb"}


def test_default_command_reaches_95_percent_and_writes_the_run_contract(train):
    run = train()  # exactly `python scripts/train.py`, only the run dir is pinned
    summary = run.summary()
    assert summary["val/acc_best"] >= 0.95, summary
    assert summary["status"] == "completed" and summary["test/acc"] >= 0.9
    for name in (
        ".hydra/config.yaml",
        ".hydra/overrides.yaml",
        "train.log",
        "model_summary.txt",
        "checkpoints/last.pt",
        "checkpoints/best.pt",
    ):
        assert (run.dir / name).is_file(), name

    ckpt = torch.load(run.dir / "checkpoints/best.pt", weights_only=True)
    assert {
        "format_version",
        "model",
        "optimizer",
        "scheduler",
        "scaler",
        "progress",
        "rng",
        "config",
        "data_meta",
        "provenance",
    } <= ckpt.keys()
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in ckpt["model"])
    assert ckpt["config"]["model"]["name"] == "cnn" and ckpt["data_meta"]["num_classes"] == 10
    assert ckpt["progress"]["best_metric"] == pytest.approx(summary["val/acc_best"])

    records = run.metrics()
    train_rows = [r for r in records if "train/loss" in r]
    assert [r["step"] for r in train_rows] == list(range(50, 191, 50))  # 19 steps/epoch x 10, every 50 steps
    assert all(r.keys() >= METRIC_KEYS for r in train_rows)
    val_rows = [r for r in records if "val/acc" in r]
    assert [r["epoch"] for r in val_rows] == list(range(1, 11))
    assert all(0 <= r["train/data_wait"] <= 1 and r["train/throughput"] > 0 for r in train_rows)
    # not a TTY here: plain periodic log lines instead of a progress bar
    assert "epoch 3 step 50  loss" in run.output
    assert "parameters: 94,186 trainable, 0 frozen" in run.output and "first batch: inputs (64, 1, 8, 8)" in run.output


# ddp: each rank's own fixed batch (the subset is batch_size x ranks); its MLP is below 0.01 by step 50 of the 150
@pytest.mark.parametrize("extra", [(), ("dist=ddp", "model=mlp", "trainer.max_epochs=60")], ids=["one-process", "ddp"])
def test_overfit_one_batch_drives_loss_to_zero(train, extra):
    run = train("debug=overfit", "logger=none", *extra)
    losses = [r["train/loss"] for r in run.metrics() if "train/loss" in r]
    assert losses[-1] < 0.01, losses
    assert run.summary()["val/acc"] == 1.0  # validation uses the same fixed batch


def test_gradient_accumulation_matches_the_large_batch(train):
    common = ["model=mlp", "model.dropout=0", "trainer.max_steps=15", "trainer.log_every_n_steps=5", "logger=none"]
    big = train(*common, "data.batch_size=64")
    accumulated = train(*common, "data.batch_size=32", "trainer.grad_accum_steps=2")
    assert max_abs_diff(big.weights(), accumulated.weights()) <= 1e-5
    big_loss = [r["train/loss"] for r in big.metrics() if "train/loss" in r]
    acc_loss = [r["train/loss"] for r in accumulated.metrics() if "train/loss" in r]
    assert big_loss == pytest.approx(acc_loss, abs=1e-5)


def test_resume_continues_exactly_where_training_stopped(train, tmp_path):
    # constant LR: a 2-epoch run then extended to 4 must follow the 4-epoch run's schedule
    common = ["scheduler=constant", "trainer.log_every_n_steps=10", "logger=none"]
    straight = train(*common, "trainer.max_epochs=4")
    first = train(*common, "trainer.max_epochs=2")
    resumed = train(*common, "trainer.max_epochs=4", f"ckpt_path={first.dir}/checkpoints/last.pt")
    assert "resumed at epoch 3, step 38" in resumed.output
    assert max_abs_diff(straight.weights(), resumed.weights()) == 0.0
    # optimizer moments and scheduler state also continued, not restarted
    a = torch.load(straight.dir / "checkpoints/last.pt", weights_only=True)
    b = torch.load(resumed.dir / "checkpoints/last.pt", weights_only=True)
    assert a["progress"] == b["progress"] and a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"] == 76
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()  # keyed by parameter name
    for name, state in a["optimizer"]["state"].items():
        assert max_abs_diff(state, b["optimizer"]["state"][name]) == 0.0, name
    straight_val = [r["val/acc"] for r in straight.metrics() if "val/acc" in r]
    resumed_val = [r["val/acc"] for r in resumed.metrics() if "val/acc" in r]
    assert straight_val[2:] == resumed_val


def test_same_seed_same_weights_other_seed_other_weights(train):
    common = ["debug=fast", "trainer.limit_train_batches=5", "trainer.deterministic=true", "logger=none"]
    a, b, c = train(*common), train(*common), train(*common, "seed=0")
    assert max_abs_diff(a.weights(), b.weights()) == 0.0
    assert max_abs_diff(a.weights(), c.weights()) > 0.0


PRECISIONS = {"bf16": "autocast bfloat16", "amp": "autocast bfloat16", "fp16": "autocast float16, GradScaler"}


def test_mixed_precision_on_cpu(tmp_path):
    # one process, a job per precision (Hydra's basic launcher): cheaper than a subprocess each. The MLP: CPU
    # autocast of the CNN's convolutions took 4x as long (float16's most of all); the switch-combination cells
    # (test_combinations.py) run the CNN under bf16 and fp16, through a bitwise resume
    overrides = ["-m", f"hydra.sweep.dir={tmp_path}", f"precision={','.join(PRECISIONS)}", "model=mlp", "logger=none"]
    proc = run_script("train.py", *overrides, "trainer.max_epochs=2", "trainer.log_every_n_steps=10", timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for job, (precision, dtype_line) in enumerate(PRECISIONS.items()):
        run = Run(proc, tmp_path / str(job))
        assert f"precision {precision} ({dtype_line})" in (run.dir / "train.log").read_text(), precision
        assert run.summary()["val/acc_best"] > 0.8, precision
        rows = [r for r in run.metrics() if "train/loss" in r]
        assert rows and all(math.isfinite(r["train/loss"]) and math.isfinite(r["train/grad_norm"]) for r in rows)
        if precision == "fp16":  # the scaler's state is logged and checkpointed
            assert "train/grad_scale" in rows[0]
            assert torch.load(run.dir / "checkpoints/last.pt", weights_only=True)["scaler"]["scale"] > 0


def test_non_finite_loss_stops_with_the_step_and_keeps_good_checkpoints(train):
    run = train(
        "optimizer=sgd",
        "optimizer.lr=100",  # the largest lr validation lets through: diverges to nan by step 6
        "scheduler=constant",
        "trainer.grad_clip=null",
        "trainer.log_every_n_steps=1",
        "model=mlp",
        "logger=none",
        check=False,
    )
    assert run.proc.returncode != 0
    assert (
        "error: loss became nan at optimizer step" in run.proc.stderr
        or "error: loss became inf at optimizer step" in run.proc.stderr
    ), run.output[-2000:]
    assert "Traceback" not in run.output
    assert not (run.dir / "checkpoints" / "last.pt").exists()


def test_every_model_data_and_switch_combination_runs_in_one_multirun(tmp_path):
    # one process, several jobs (Hydra's basic launcher): cheaper than a subprocess each
    proc = run_script(
        "train.py",
        "-m",
        f"hydra.sweep.dir={tmp_path}",
        "debug=fast",
        "data=synthetic",
        "data.image_size=16",
        "data.num_samples=256",
        "model=mlp,cnn",
        "trainer.channels_last=true",
        "scheduler=onecycle",
        "optimizer=sgd",
        "logger=none",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for job in range(2):
        summary = json.loads((tmp_path / str(job) / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["global_step"] == 3


def test_loader_workers_plateau_and_step_checkpoints(train):
    run = train(
        "model=mlp",
        "data.num_workers=2",
        "scheduler=plateau",
        "trainer.max_epochs=3",
        "trainer.ckpt_every_n_steps=7",
        "trainer.grad_accum_steps=3",
        "trainer.log_every_n_steps=2",
        "logger=none",
    )
    steps = [r["step"] for r in run.metrics() if "train/loss" in r]
    assert steps[:3] == [2, 4, 6] and run.summary()["global_step"] == 21  # ceil(19 batches / 3) x 3 epochs
    assert run.summary()["val/acc_best"] > 0.8


def test_missing_checkpoint_is_one_clear_error(train, tmp_path):
    run = train(f"ckpt_path={tmp_path}/nope.pt", "logger=none", check=False)
    assert run.proc.returncode != 0
    assert f"error: checkpoint not found: {tmp_path}/nope.pt" in run.proc.stderr
    assert "Traceback" not in run.output


def test_a_device_loader_for_a_split_not_in_memory_is_refused_before_the_run_writes(train, tmp_path):
    from PIL import Image

    for cls in ("a", "b"):
        (tmp_path / "images" / "train" / cls).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (8, 8), (40 * i, 200 if cls == "a" else 0, 0)).save(
                tmp_path / "images/train" / cls / f"{i}.png"
            )
    run = train(
        "data=image_folder", f"data.root={tmp_path / 'images'}", "data.image_size=8", "data.batch_size=4",
        "data.loader=device", "model=mlp", "logger=none", check=False,
    )  # fmt: skip
    assert run.proc.returncode == 1, run.output[-3000:]
    assert run.proc.stderr.strip().splitlines()[-1] == (
        "error: data.loader=device: the train split (ImageFolderDataset) is not held in memory as tensors (an "
        "InMemoryDataset of lab.data.common); use data.loader=torch"
    )
    assert not run.dir.exists(), sorted(run.dir.rglob("*"))  # nothing written: not even Hydra's .hydra/


def test_two_runs_started_together_get_their_own_directories(tmp_path):
    command = [sys.executable, str(REPO / "scripts/train.py"), "debug=fast", "model=mlp", "logger=none"]
    procs = [
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    runs = sorted((tmp_path / "outputs" / "train").iterdir())
    assert len(runs) == 2 and all((r / "summary.json").is_file() for r in runs)
    shutil.rmtree(tmp_path / "outputs")


# torch.compile with channels_last on the CNN (checkpoints keep plain weights, no _orig_mod. prefix): the
# none-fp16-cnn-channels_last-compile-accum2-workers2 cell of tests/integration/test_combinations.py trains it, resumes
# it bitwise and checks its checkpoint's keys
