"""A checkpoint from elsewhere runs no code through any entry script (issue 42): the `shards` it names must be a
directory in the shards/ folder next to it, and that directory's DCP metadata is read with an allow-list, so a
pickle planted there is refused in one line before anything is written."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from helpers import run_script


class _RunsACommand:
    """Unpickles as os.system("touch <marker>"): what the issue's `.metadata` held."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _entries(ckpt: Path, run: Path, out: Path, images: Path) -> dict[str, tuple[str, ...]]:
    train = ("train.py", "debug=fast", "logger=none")
    return {
        "eval": ("eval.py", f"ckpt_path={ckpt}", "logger=none", f"hydra.run.dir={out}"),
        "infer": ("infer.py", f"ckpt_path={ckpt}", f"input={images}", "logger=none", f"hydra.run.dir={out}"),
        "export": ("export.py", f"ckpt_path={ckpt}", "logger=none", f"hydra.run.dir={out}"),
        "train ckpt_path": (*train, f"ckpt_path={ckpt}", f"hydra.run.dir={out}"),
        "model.init_from": (*train, f"model.init_from={ckpt}", f"hydra.run.dir={out}"),
        "resume=auto": (*train, "resume=auto", f"hydra.run.dir={run}"),  # the run's own last.pt
    }


@pytest.mark.parametrize("where", ["absolute path", "own shards folder"])
@pytest.mark.parametrize("entry", ["eval", "infer", "export", "train ckpt_path", "model.init_from", "resume=auto"])
def test_a_planted_shard_metadata_runs_nothing_through_any_entry(finished_run, tmp_path, entry, where) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    (evil / "dcp").mkdir(parents=True)
    (evil / "dcp" / ".metadata").write_bytes(pickle.dumps(_RunsACommand(marker)))
    run = shutil.copytree(finished_run, tmp_path / "run")
    (run / "summary.json").unlink()  # killed before its end: resume=auto continues it
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    ckpt.pop("model")
    ckpt["progress"].update(epoch=0, global_step=0, batch_in_epoch=0)  # training left: nothing refuses it sooner
    if where == "absolute path":  # the file: next to the directory it names
        ckpt["shards"] = str(evil / "dcp")
        torch.save(ckpt, evil / "shards_abs.pt")
        path = evil / "shards_abs.pt"
    else:
        planted = run / "checkpoints" / "shards" / "step-000000001"
        shutil.copytree(evil / "dcp", planted)
        ckpt["shards"] = str(planted.relative_to(run / "checkpoints"))
        path = run / "checkpoints" / "last.pt"
    torch.save(ckpt, run / "checkpoints" / "last.pt")
    images = tmp_path / "images.pt"
    torch.save(torch.rand(2, 1, 8, 8), images)
    before = _tree(tmp_path)

    script, *overrides = _entries(path, run, tmp_path / "out", images)[entry]
    proc = run_script(script, *overrides, cwd=tmp_path)

    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    refusal = "refused" if where == "absolute path" else "names posix.system, which DCP metadata never holds"
    assert refusal in error, error
    assert not marker.exists()
    assert _tree(tmp_path) == before  # nothing written, nothing changed
