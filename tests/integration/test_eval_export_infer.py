"""eval / export / infer end to end on one tiny training run: numbers equal training's, exports equal eager,
every backend predicts the same, user mistakes end in one line."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch
import yaml

from helpers import REPO, Run, made_once, run_script
from wandb_reader import find_run_files, read_run

pytestmark = pytest.mark.slow

NUM_IMAGES = 16


@pytest.fixture(scope="module")
def trained(shared_dir):
    """Two epochs of the CNN on digits (val/acc ~0.98), with wandb offline so it has a run id to link to; trained
    once for the session's workers."""
    run_dir = shared_dir / "eval_export_infer" / "run"
    run_dir.parent.mkdir(exist_ok=True)

    def make() -> None:
        proc = run_script("train.py", "model=cnn", "trainer.max_epochs=2", f"hydra.run.dir={run_dir}")
        assert proc.returncode == 0, proc.stderr[-4000:]

    made_once(run_dir, make)
    return Run(None, run_dir)


@pytest.fixture(scope="module")
def best(trained):
    return trained.dir / "checkpoints" / "best.pt"


def _run(script, tmp, *overrides):
    run_dir = tmp / script.removesuffix(".py")
    return Run(run_script(script, f"hydra.run.dir={run_dir}", *overrides), run_dir)


def _ok(run: Run) -> Run:
    assert run.proc.returncode == 0, run.output[-4000:]
    return run


@pytest.fixture(scope="module")
def exported(best, shared_dir):
    """Every format, in one export run (once for the session's workers)."""
    run_dir = shared_dir / "eval_export_infer" / "export"

    log = run_dir.with_name("export.output.txt")  # what the run printed, for the tests that read its log

    def make() -> None:
        run = _run(
            "export.py",
            run_dir.parent,
            f"ckpt_path={best}",
            "export.formats=[onnx,pt2,torchscript]",
            "logger=none",
        )
        log.write_text(_ok(run).output)

    made_once(run_dir, make)
    return Run(subprocess.CompletedProcess([], 0, log.read_text(), ""), run_dir)


@pytest.fixture(scope="module")
def images(best, tmp_path_factory):
    """PNGs of digits test-split samples (pixels 0..16 scaled to 0..255), in two folders, plus a corrupt PNG and
    a file that is not an image. Returns (folder, {file name: the dataset's normalized tensor})."""
    from PIL import Image

    from lab.workflows import restore

    folder = tmp_path_factory.mktemp("images")
    (folder / "more").mkdir()
    test = restore.rebuild_data(restore.rebuild(best)).test
    tensors = {}
    for index in range(NUM_IMAGES):
        pixels = test.images[index, 0].numpy().astype(np.float32)
        name = f"{'more/' if index % 2 else ''}digit{index:02d}.png"
        Image.fromarray(np.round(pixels * 255 / 16).astype(np.uint8)).save(folder / name)
        tensors[name] = test[index][0]
    (folder / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"definitely not pixel data")
    (folder / "notes.txt").write_text("not an image")
    return folder, tensors


# --------------------------------------------------------------------------- eval
def test_eval_reproduces_training_metrics_and_logs_a_linked_wandb_run(trained, best, tmp_path):
    val = _ok(_run("eval.py", tmp_path / "val", f"ckpt_path={best}", "eval.split=val"))
    test = _ok(_run("eval.py", tmp_path / "test", f"ckpt_path={best}", "logger=none", "data.batch_size=100"))

    summary = trained.summary()
    best_row = next(r for r in trained.metrics() if r.get("epoch") == summary["best_epoch"] and "val/acc" in r)
    report = json.loads((val.dir / "eval.json").read_text())
    assert report["split"] == "val"
    for key in ("loss", "acc", "acc_top5"):
        assert report["metrics"][key] == pytest.approx(best_row[f"val/{key}"], abs=1e-6)
    test_report = json.loads((test.dir / "eval.json").read_text())
    assert test_report["metrics"]["acc"] == pytest.approx(summary["test/acc"], abs=1e-6)
    assert test_report["metrics"]["loss"] == pytest.approx(summary["test/loss"], abs=1e-6)

    matrix = np.array(report["confusion_matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == report["num_samples"] == 270
    assert np.trace(matrix) / matrix.sum() == pytest.approx(report["metrics"]["acc"])
    per_class = [report["per_class_acc"][str(c)] for c in range(10)]
    assert per_class == pytest.approx(list(np.diag(matrix) / matrix.sum(axis=1)))
    assert (val.dir / "confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert val.metrics()[0]["val/acc"] == report["metrics"]["acc"] and val.summary()["status"] == "completed"

    # the wandb record: job type, resolved config, the code's commit, the link to the training run
    (run_file,) = find_run_files(val.dir / "wandb")
    record = read_run(run_file)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert record.job_type == "eval" and record.git_commit == head
    assert record.config["ckpt_path"] == str(best) and record.config["eval"]["split"] == "val"  # + eval.<step>
    assert record.config["data_effective"]["name"] == "digits" and record.config["model"]["name"] == "cnn"
    hydra_config = yaml.safe_load((val.dir / ".hydra/config.yaml").read_text())
    assert all(record.config[key] == value for key, value in hydra_config.items())  # the job's config, verbatim
    source = record.config["source_run"]
    assert source["wandb_id"] == summary["wandb_id"] and source["run_dir"] == str(trained.dir)
    assert record.config["provenance"]["git_commit"] == head
    assert record.summary["val/acc"] == pytest.approx(report["metrics"]["acc"])
    for name in ("eval.json", "confusion_matrix.png"):  # attached: copied into the run's files/ for upload
        assert (run_file.parent / "files" / name).is_file()


# --------------------------------------------------------------------------- export
def test_every_format_matches_eager(exported, best):
    manifest = json.loads((exported.dir / "export_manifest.json").read_text())
    for fmt, file in (("onnx", "model.onnx"), ("pt2", "model.pt2"), ("torchscript", "model.torchscript.pt")):
        entry = manifest["artifacts"][fmt]
        assert entry["status"] == "ok" and entry["file"] == file and (exported.dir / file).is_file()
        parity = entry["parity"]
        assert parity["max_abs_diff"] <= 1e-4 and parity["top1_agreement"] == 1.0
        assert parity["samples"] == 257 and 1 in parity["batch_sizes"]
    assert "TorchScript is deprecated" in exported.output
    assert manifest["input"] == {"name": "input", "shape": ["batch", 1, 8, 8], "dtype": "float32", "layout": "NCHW"}
    assert manifest["class_names"] == [str(i) for i in range(10)] and isinstance(manifest["opset"], int)
    ckpt = torch.load(best, weights_only=True)
    assert manifest["preprocessing"]["mean"] == ckpt["data_meta"]["mean"]
    assert manifest["source_run"]["wandb_id"] == ckpt["provenance"]["wandb_id"]
    assert len(manifest["git_commit"]) == 40


def test_onnx_file_matches_the_checkpoint_independently(exported, best):
    """Not trusting the manifest: onnxruntime on the file vs the checkpoint's model, odd batch size."""
    import onnxruntime as ort

    from lab.workflows import restore

    restored = restore.rebuild(best)
    x = torch.randn(7, 1, 8, 8)
    session = ort.InferenceSession(str(exported.dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (onnx_logits,) = session.run(None, {"input": x.numpy()})
    with torch.no_grad():
        eager = restored.model(x)
    assert np.abs(onnx_logits - eager.numpy()).max() < 1e-4


PERTURB = """
import numpy as np, onnx
from onnx import numpy_helper
from lab.exporting import writers

name, write_onnx = writers.WRITERS["onnx"]

def perturbed(model, example, path, opset, dims):
    written = write_onnx(model, example, path, opset, dims)
    proto = onnx.load(str(path))
    weight = max(proto.graph.initializer, key=lambda t: int(np.prod(t.dims)))  # the largest weight tensor
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.01, weight.name))
    onnx.save(proto, str(path))
    return written

writers.WRITERS["onnx"] = (name, perturbed)
"""


def test_a_perturbed_export_fails_the_parity_check(best, tmp_path):
    run_dir = tmp_path / "export"
    args = [f"ckpt_path={best}", "export.formats=[onnx,pt2]", "logger=none", f"hydra.run.dir={run_dir}"]
    proc = run_script("export.py", *args, patch=PERTURB)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "parity check failed: onnx" in error and "model.onnx not written" in error
    assert not (run_dir / "model.onnx").exists() and (run_dir / "model.pt2").is_file()
    assert not list(run_dir.glob(".*.tmp"))  # the staged file that failed went with its staging folder
    manifest = json.loads((run_dir / "export_manifest.json").read_text())
    assert list(manifest["artifacts"]) == ["pt2"] and manifest["artifacts"]["pt2"]["status"] == "ok"  # verified only
    onnx_entry = manifest["failed"]["onnx"]
    assert onnx_entry["status"] == "failed_parity" and onnx_entry["parity"]["max_abs_diff"] > 1e-4


KILL_DURING_PARITY = """
import os, signal, time
from lab.exporting import parity

compare, calls = parity.compare, []

def killed_at_the_second_check(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # model.onnx passed; model.pt2 is written and being checked
        os.kill(os.getpid(), signal.{signal})
        time.sleep(60)
    return compare(*args, **kwargs)

parity.compare = killed_at_the_second_check
"""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_an_export_killed_mid_check_leaves_no_final_named_file_it_did_not_verify(best, tmp_path, how):
    """Killed (SIGKILL: the staging folder stays) or stopped (SIGTERM: it is removed on the way out), the export
    publishes only what it verified, and the same command run again continues it in its dir."""
    run_dir = tmp_path / "export"
    args = [f"ckpt_path={best}", "export.formats=[onnx,pt2]", "logger=none", f"hydra.run.dir={run_dir}"]
    proc = run_script("export.py", *args, patch=KILL_DURING_PARITY.replace("{signal}", how))
    assert proc.returncode == (-9 if how == "SIGKILL" else 143), proc.stderr[-3000:]
    assert (run_dir / "model.onnx").is_file()  # verified before the kill: published
    assert not (run_dir / "model.pt2").exists()  # complete on disk but unverified: only under its staging name
    assert not (run_dir / "export_manifest.json").exists()
    from lab.inference.backends import OnnxBackend

    assert OnnxBackend(run_dir / "model.onnx")(torch.zeros(3, 1, 8, 8)).shape == (3, 10)  # a whole file
    left = [".model.pt2.tmp"] if how == "SIGKILL" else []
    assert [p.name for p in run_dir.glob(".*.tmp")] == left
    first_config = (run_dir / ".hydra" / "config.yaml").read_bytes()

    other = run_script("export.py", *args[:-1], "export.formats=[onnx]", f"hydra.run.dir={run_dir}")
    assert other.returncode == 1 and "holds a run" in other.stderr  # another export: not this one's to continue
    again = run_script("export.py", *args)  # the same command continues the killed export in its dir
    assert again.returncode == 0, again.stderr[-3000:]
    removed = f"removed {run_dir / '.model.pt2.tmp'}: left by an export that was killed"
    assert (removed in again.stdout + again.stderr) == (how == "SIGKILL")
    assert not list(run_dir.glob(".*.tmp")) and (run_dir / "model.pt2").is_file()
    assert list(json.loads((run_dir / "export_manifest.json").read_text())["artifacts"]) == ["onnx", "pt2"]
    assert (run_dir / ".hydra" / "config.yaml").read_bytes() == first_config  # this attempt's: attempt-2/
    assert (run_dir / ".hydra" / "attempt-2" / "config.yaml").is_file()


# --------------------------------------------------------------------------- infer
def _predictions(run: Run) -> dict:
    return json.loads((run.dir / "predictions.json").read_text())


def test_every_backend_predicts_the_same_and_skips_the_corrupt_image(best, exported, images, tmp_path):
    folder, tensors = images
    quiet = "logger=none"  # one wandb run (eager's) is enough to check the record
    runs = {
        "eager": _run("infer.py", tmp_path / "eager", f"ckpt_path={best}", f"input={folder}"),
        "onnx": _run("infer.py", tmp_path / "onnx", f"ckpt_path={exported.dir}/model.onnx", f"input={folder}", quiet),
        "pt2": _run("infer.py", tmp_path / "pt2", f"ckpt_path={exported.dir}/model.pt2", f"input={folder}", quiet),
    }
    top1 = {}
    for backend, run in runs.items():
        out = _predictions(_ok(run))
        assert out["backend"] == backend
        assert [s["path"] for s in out["skipped"]] == [str(folder / "corrupt.png")]
        assert "corrupt.png" in run.output  # reported in the log too
        top1[backend] = {p["path"]: p["label"] for p in out["predictions"]}
        assert len(top1[backend]) == NUM_IMAGES
        rows = (run.dir / "predictions.csv").read_text().splitlines()
        assert rows[0].startswith("path,top1_label,top1_prob,top2_label") and len(rows) == NUM_IMAGES + 1
    assert top1["eager"] == top1["onnx"] == top1["pt2"]

    # the preprocessing is eval's: each PNG gives (up to 8-bit rounding) the dataset's tensor, so the model's
    # probabilities for the file match its probabilities for the dataset sample
    from lab.workflows import restore

    model = restore.rebuild(best).model
    with torch.no_grad():
        for row in _predictions(runs["eager"])["predictions"]:
            name = row["path"].removeprefix(f"{folder}/")
            expected = model(tensors[name].unsqueeze(0)).softmax(1)[0]
            assert row["top_k"][0]["prob"] == pytest.approx(float(expected.max()), abs=1e-2), name
            assert row["label"] == str(int(expected.argmax()))

    (run_file,) = find_run_files(runs["eager"].dir / "wandb")
    record = read_run(run_file)
    assert record.job_type == "infer" and record.summary["infer/skipped"] == 1


def test_infer_dry_run_prints_the_config_without_running(tmp_path):
    proc = run_script("infer.py", "ckpt_path=model.onnx", "input=imgs/*.png", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    assert "input: imgs/*.png" in proc.stdout and "top_k: 5" in proc.stdout


# --------------------------------------------------------------------------- user mistakes
@pytest.fixture
def corrupt_checkpoint(tmp_path):
    path = tmp_path / "broken.pt"
    path.write_bytes(b"PK\x03\x04 truncated zip, not a checkpoint")
    return path


@pytest.fixture
def lonely_onnx(exported, tmp_path):
    """An exported model without its manifest."""
    path = tmp_path / "alone" / "model.onnx"
    path.parent.mkdir()
    path.write_bytes((exported.dir / "model.onnx").read_bytes())
    return path


@pytest.fixture
def exported_copy(exported, tmp_path):
    """model.onnx and its manifest, copied: a test may edit either."""
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in ("model.onnx", "export_manifest.json"):
        (folder / name).write_bytes((exported.dir / name).read_bytes())
    return folder


def test_a_swapped_model_is_refused_unless_allowed(exported, exported_copy, images, tmp_path):
    """A model.onnx that is not the one the export verified (here: its largest weight halved) would run with the
    manifest's preprocessing and class names, unnoticed: refused in one line, run only when asked for."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(exported.dir / "model.onnx"))
    weight = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) / 2, weight.name))
    onnx.save(model, str(exported_copy / "model.onnx"))
    args = [f"ckpt_path={exported_copy}/model.onnx", f"input={images[0]}", "logger=none"]
    refused = _run("infer.py", tmp_path / "refused", *args)
    assert refused.proc.returncode == 1 and "Traceback" not in refused.output
    assert refused.proc.stderr.strip().splitlines() == [
        f"error: {exported_copy}/model.onnx is not the file the export verified (sha256 differs from "
        "export_manifest.json's): it was replaced or modified after export; export again, or pass "
        "infer.allow_modified_artifact=true to run it anyway"
    ]
    assert not (refused.dir / "predictions.csv").exists()
    allowed = _ok(_run("infer.py", tmp_path / "allowed", *args, "infer.allow_modified_artifact=true"))
    assert "not the file the export verified" in allowed.output  # still said, as a warning
    assert len(_predictions(allowed)["predictions"]) == NUM_IMAGES


def test_an_edited_manifest_input_shape_is_one_line_naming_both_shapes(exported_copy, images, tmp_path):
    path = exported_copy / "export_manifest.json"
    edited = json.loads(path.read_text())
    edited["data_meta"]["input_shape"] = [1, 8, 9]
    path.write_text(json.dumps(edited))
    run = _run("infer.py", tmp_path, f"ckpt_path={exported_copy}/model.onnx", f"input={images[0]}", "logger=none")
    assert run.proc.returncode == 1 and "Traceback" not in run.output
    assert run.proc.stderr.strip().splitlines() == [
        "error: export_manifest.json next to model.onnx gives data_meta.input_shape [1, 8, 9], but model.onnx takes "
        "inputs of shape (batch, 1, 8, 8): restore the manifest of this export, or export again"
    ]


@pytest.mark.parametrize(
    ("script", "overrides", "message"),
    [
        ("eval.py", [], "error: ckpt_path is required"),
        ("eval.py", ["ckpt_path={corrupt}"], "error: cannot read checkpoint"),
        ("infer.py", ["ckpt_path={best}", "input={tmp}/no/such/dir"], "does not exist"),
        ("infer.py", ["ckpt_path={lonely}", "input={images}"], "needs export_manifest.json next to it"),
    ],
    ids=["eval-no-ckpt", "eval-corrupt-ckpt", "infer-missing-input", "onnx-no-manifest"],
)
def test_user_mistakes_end_in_one_line(script, overrides, message, best, corrupt_checkpoint, request, tmp_path):
    values = {"best": best, "corrupt": corrupt_checkpoint, "tmp": tmp_path}
    if any("{lonely}" in o for o in overrides):
        values["lonely"] = request.getfixturevalue("lonely_onnx")
        values["images"] = request.getfixturevalue("images")[0]
    run = _run(script, tmp_path, *[o.format(**values) for o in overrides], "logger=none")
    assert run.proc.returncode == 1, run.output[-3000:]
    assert "Traceback" not in run.output
    assert run.proc.stderr.strip().splitlines()[-1].startswith("error:")
    assert message in run.proc.stderr
