"""lab.checkpointing: atomic writes, weights_only loads, RNG capture, wrapper prefixes, clear errors."""

from __future__ import annotations

import errno
import logging
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from lab import checkpointing
from lab.errors import UserError
from lab.files import atomic_path, remove_stale_temps
from lab.optim.optimizers import build_optimizer
from lab.optim.schedulers import build_scheduler


def _net(out_features: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, out_features))


def _assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


# --------------------------------------------------------------------------- save / copy
def test_save_is_atomic_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "run" / "checkpoints" / "last.pt"  # parent folders are created
    checkpointing.save(path, {"model": _net().state_dict(), "progress": {"epoch": 1}})
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]
    ckpt = checkpointing.read(path)
    assert ckpt["format_version"] == checkpointing.FORMAT_VERSION and ckpt["progress"] == {"epoch": 1}
    checkpointing.save(path, {"model": {}, "progress": {"epoch": 2}})  # overwriting works too
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]
    assert checkpointing.read(path)["progress"] == {"epoch": 2}


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.pt"
    good = _net().state_dict()
    checkpointing.save(path, {"model": good, "progress": {"epoch": 1}})
    before = path.read_bytes()

    def crash_mid_write(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")  # a partial write, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpointing.storage.torch, "save", crash_mid_write)
    with pytest.raises(
        UserError, match=r"cannot write .*last\.pt: no space left on the device.*previous last\.pt is intact"
    ):
        checkpointing.save(path, {"model": {}, "progress": {"epoch": 2}})
    monkeypatch.undo()

    assert path.read_bytes() == before
    ckpt = checkpointing.read(path)
    assert ckpt["progress"] == {"epoch": 1}
    _assert_same_state(ckpt["model"], good)
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # the partial temp file is cleaned up


def test_a_failure_raised_while_writing_on_the_way_out_is_not_taken_for_the_writes(tmp_path: Path) -> None:
    """summary.json is written while the run's own failure unwinds. Another error raised during that write (torch's
    SIGCHLD handler reporting the dead loader worker again) has the run's failure as its context, and that one's
    broken pipe is no failure of the write: the error goes on as it is, not as "cannot write summary.json"."""
    died = "DataLoader worker (pid 1) is killed by signal: Killed."
    with pytest.raises(RuntimeError, match=r"killed by signal"):
        try:
            try:
                raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
            except ConnectionResetError as err:
                raise RuntimeError("DataLoader worker (pid(s) 1) exited unexpectedly") from err
        except RuntimeError:
            with atomic_path(tmp_path / "summary.json"):
                raise RuntimeError(died)  # noqa: B904  (as torch's signal handler raises it: a context, no cause)
    assert not list(tmp_path.iterdir())
    own = pytest.raises(UserError, match=r"cannot write .*summary\.json: .*Connection reset")  # the write's own
    with own, atomic_path(tmp_path / "summary.json"):
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")


def test_copy_is_complete_and_leaves_no_temp_file(tmp_path: Path) -> None:
    checkpointing.save(tmp_path / "last.pt", {"model": _net().state_dict()})
    checkpointing.copy(tmp_path / "last.pt", tmp_path / "best.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]
    assert (tmp_path / "best.pt").read_bytes() == (tmp_path / "last.pt").read_bytes()


# --------------------------------------------------------------------------- payload
def test_full_payload_loads_with_weights_only(tmp_path: Path, compose) -> None:
    cfg = compose(["scheduler=plateau", "scheduler.warmup_steps=2"])
    model = _net()
    optimizer = build_optimizer(cfg.optimizer, model, cfg.model)
    scheduler = build_scheduler(cfg.scheduler, optimizer, total_steps=10)
    cosine_cfg = compose(["scheduler=cosine"]).scheduler
    cosine = build_scheduler(cosine_cfg, build_optimizer(cfg.optimizer, model, cfg.model), 10)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()  # optimizer moments exist
    scheduler.step()
    scheduler.step_metric(0.3)
    scaler = torch.amp.GradScaler("cpu", enabled=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "extra_scheduler": cosine.state_dict(),
        "scaler": scaler.state_dict(),
        "progress": {"epoch": 1, "global_step": 7, "best_metric": float("-inf"), "best_epoch": None},
        "rng": checkpointing.capture_rng(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "data_meta": {"num_classes": 3, "mean": [0.5], "std": [0.25], "class_names": ["a", "b", "c"]},
        "provenance": {"git_commit": "abc123", "dirty": False, "argv": ["scripts/train.py", "seed=1"]},
    }
    path = tmp_path / "last.pt"
    checkpointing.save(path, payload)
    raw = torch.load(path, map_location="cpu", weights_only=True)  # no pickled code: plain containers only
    assert raw.keys() == {"format_version", *payload}
    _assert_same_state(raw["model"], payload["model"])
    assert raw["config"] == payload["config"] and raw["progress"] == payload["progress"]
    assert raw["scaler"]["scale"] == scaler.state_dict()["scale"]
    ckpt = checkpointing.read(path)
    # Everything restores into fresh objects.
    fresh = _net(3)
    checkpointing.load_model_state(fresh, ckpt["model"])
    fresh_opt = build_optimizer(cfg.optimizer, fresh, cfg.model)
    fresh_opt.load_state_dict(ckpt["optimizer"])
    build_scheduler(cfg.scheduler, fresh_opt, 10).load_state_dict(ckpt["scheduler"])
    checkpointing.restore_rng(ckpt["rng"])


def _draw() -> tuple:
    return (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        np.random.standard_normal(),
        torch.rand(3).tolist(),
        torch.randn(2).tolist(),
    )


def test_rng_round_trip_through_a_weights_only_file(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    random.gauss(0, 1)  # leaves a cached second gaussian in python's state
    np.random.standard_normal()  # and in numpy's (has_gauss=1)
    state = checkpointing.capture_rng()
    first = _draw()
    checkpointing.save(tmp_path / "rng.pt", {"model": {}, "rng": state})
    loaded = torch.load(tmp_path / "rng.pt", weights_only=True)["rng"]

    checkpointing.restore_rng(state)
    assert _draw() == first
    _draw()  # move on, then restore from the file's copy
    checkpointing.restore_rng(loaded)
    assert _draw() == first


# --------------------------------------------------------------------------- wrappers
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("fc.weight", "fc.weight"),
        ("module.fc.weight", "fc.weight"),
        ("_orig_mod.fc.weight", "fc.weight"),
        ("module._orig_mod.fc.weight", "fc.weight"),
        ("_orig_mod.module.fc.weight", "fc.weight"),
        ("blocks.0.module_x.weight", "blocks.0.module_x.weight"),  # only leading prefixes, whole segments
    ],
)
def test_strip_wrapper_prefixes(key: str, expected: str) -> None:
    value = torch.ones(1)
    assert checkpointing.strip_wrapper_prefixes({key: value}) == {expected: value}


def test_unwrap_and_load_across_torch_compile() -> None:
    model = _net()
    compiled = torch.compile(model)  # returns an OptimizedModule at once; never run, so nothing compiles
    assert compiled is not model
    assert checkpointing.unwrap(compiled) is model
    assert checkpointing.unwrap(model) is model
    state = compiled.state_dict()
    assert all(key.startswith("_orig_mod.") for key in state)

    plain = _net()
    nn.init.zeros_(plain[0].weight)
    checkpointing.load_model_state(plain, state)  # compiled -> plain
    _assert_same_state(plain.state_dict(), model.state_dict())
    target = _net()
    nn.init.zeros_(target[0].weight)
    checkpointing.load_model_state(torch.compile(target), model.state_dict())  # plain -> compiled
    _assert_same_state(target.state_dict(), model.state_dict())


# --------------------------------------------------------------------------- load errors
class NotAllowed:
    """A pickled class instance: weights_only loading must refuse it (it would run code from the file)."""


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"checkpoint not found: .*nope\.pt"):
        checkpointing.read(tmp_path / "nope.pt")


def test_a_directory_names_the_checkpoint_inside_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"is a directory, not a checkpoint file; .*<run dir>/checkpoints/last\.pt"):
        checkpointing.read(tmp_path)
    checkpointing.save(tmp_path / "checkpoints" / "last.pt", {"model": {}})
    with pytest.raises(UserError, match=rf"pass the \.pt file, e\.g\. ckpt_path={tmp_path}/checkpoints/last\.pt"):
        checkpointing.read(tmp_path)  # a run dir: its last.pt is named


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", r"is empty \(0 bytes\): its write never completed"),
        (b"this is not a checkpoint", r"not a torch checkpoint"),
        (bytes(range(256)) * 8, r"not a torch checkpoint"),  # random bytes
        ("zip", r"truncated or damaged"),
    ],
    ids=["empty", "text", "random-bytes", "truncated"],
)
def test_each_unreadable_file_gets_its_own_reason(tmp_path: Path, content, reason: str) -> None:
    path = tmp_path / "bad.pt"
    if content == "zip":
        checkpointing.save(path, {"model": _net().state_dict()})
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    with pytest.raises(UserError, match=reason) as caught:
        checkpointing.read(path)
    assert "\n" not in str(caught.value) and "file an issue" not in str(caught.value)


def test_load_refuses_pickled_code(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"format_version": checkpointing.FORMAT_VERSION, "model": {}, "obj": NotAllowed()}, path)
    with pytest.raises(UserError, match=r"cannot read checkpoint .*pickled Python object \(.*NotAllowed\)"):
        checkpointing.read(path)


@pytest.mark.parametrize(
    ("code", "fix"),
    [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only file system")],
)
def test_an_unwritable_dir_names_the_path_and_the_fix_and_keeps_the_previous_file(
    tmp_path: Path, monkeypatch, code, fix
):
    path = tmp_path / "last.pt"
    checkpointing.save(path, {"model": _net().state_dict(), "progress": {"epoch": 1}})

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(checkpointing.storage.torch, "save", fail)
    with pytest.raises(UserError, match=rf"cannot write .*last\.pt: {fix}.*previous last\.pt is intact"):
        checkpointing.save(path, {"model": {}, "progress": {"epoch": 2}})
    monkeypatch.undo()
    assert checkpointing.read(path)["progress"] == {"epoch": 1}
    assert not list(tmp_path.glob(".*.tmp"))


# torch's C++ writer: a RuntimeError, the OSError (if any) only in its __context__
TORCH_WRITE_FAILED = "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0"
TORCH_OPEN_FAILED = "File {} cannot be opened."


def _torch_save_failing_with(code: int):
    """A torch.save that writes part of the file, then fails as torch's writer does when the OS refuses a write."""

    def fail(obj, f, *args, **kwargs):
        f.write(b"half")
        try:
            raise OSError(code, os.strerror(code))
        except OSError:
            raise RuntimeError(TORCH_WRITE_FAILED) from None  # as torch does: the OSError stays the __context__

    return fail


def test_torchs_runtime_error_with_the_os_error_in_its_context_names_the_cause(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "last.pt"
    checkpointing.save(path, {"model": _net().state_dict(), "progress": {"epoch": 1}})

    monkeypatch.setattr(checkpointing.storage.torch, "save", _torch_save_failing_with(errno.ENOSPC))
    with pytest.raises(UserError, match=r"cannot write .*last\.pt: no space left on the device.*previous last\.pt"):
        checkpointing.save(path, {"model": {}, "progress": {"epoch": 2}})
    monkeypatch.undo()
    assert checkpointing.read(path)["progress"] == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


@pytest.mark.parametrize(
    ("flag", "fix"), [(os.ST_RDONLY, "read-only file system"), (0, "the writer failed .*PytorchStreamWriter")]
)
def test_torchs_runtime_error_without_an_errno_is_diagnosed_from_the_folder(tmp_path: Path, monkeypatch, flag, fix):
    """torch.save to a path on a read-only mount: "File ... cannot be opened." and no errno anywhere; what the folder
    says (read-only, here faked: tests run as root, whom chmod does not stop) names the cause."""
    from lab import files

    path = tmp_path / "model.pt2"
    path.write_bytes(b"the verified one")
    real = os.statvfs(tmp_path)
    fields = {name: getattr(real, name) for name in dir(real) if name.startswith("f_")}
    fake = type("StatVFS", (), {**fields, "f_flag": flag})
    monkeypatch.setattr(files.os, "statvfs", lambda folder: fake)
    message = rf"cannot write .*model\.pt2: {fix}.*previous model\.pt2 is intact"
    with pytest.raises(UserError, match=message), files.atomic_path(path) as tmp:
        raise RuntimeError(TORCH_OPEN_FAILED.format(tmp) if flag else TORCH_WRITE_FAILED)
    assert path.read_bytes() == b"the verified one"


def test_a_runtime_error_that_is_no_write_failure_is_not_disguised(tmp_path: Path) -> None:
    from lab import files

    with pytest.raises(RuntimeError, match=r"^a bug in the block$"), files.atomic_path(tmp_path / "x.json") as tmp:
        tmp.write_text("{}")
        raise RuntimeError("a bug in the block")
    assert not list(tmp_path.iterdir())


def test_a_clean_up_that_fails_too_still_gives_one_line_and_keeps_the_previous_file(tmp_path: Path, monkeypatch):
    """The folder became unwritable mid-write: removing the partial temp file fails inside the handler as well."""
    path = tmp_path / "last.pt"
    checkpointing.save(path, {"model": _net().state_dict(), "progress": {"epoch": 1}})

    def cannot_unlink(self, missing_ok=False):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(checkpointing.storage.torch, "save", _torch_save_failing_with(errno.EROFS))
    monkeypatch.setattr(Path, "unlink", cannot_unlink)
    with pytest.raises(UserError) as refused:
        checkpointing.save(path, {"model": {}, "progress": {"epoch": 2}})
    monkeypatch.undo()
    message = str(refused.value)
    assert "\n" not in message and "read-only file system" in message and "previous last.pt is intact" in message
    assert message.endswith(f"remove the partial {tmp_path / '.last.pt.tmp'}")
    assert checkpointing.read(path)["progress"] == {"epoch": 1}


ULIMIT_SAVE = """
import resource, signal, sys
import torch
from lab import checkpointing
from lab.errors import UserError

path = sys.argv[1]
checkpointing.save(path, {"model": {"w": torch.zeros(10)}, "progress": {"epoch": 1}})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the kernel's signal would kill us: the write then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))  # ulimit -f
try:
    checkpointing.save(path, {"model": {"w": torch.zeros(1_000_000)}, "progress": {"epoch": 2}})
except UserError as err:
    print(err)
"""


@pytest.mark.integration  # starts a process: a Python subprocess under ulimit -f
def test_a_file_size_limit_ends_in_one_line_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    """A real `ulimit -f` (RLIMIT_FSIZE, in a subprocess): torch fails with "unexpected pos", a RuntimeError."""
    import subprocess
    import sys

    path = tmp_path / "last.pt"
    proc = subprocess.run(
        [sys.executable, "-c", ULIMIT_SAVE, str(path)], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.strip().splitlines() == [
        f"cannot write {path}: file too large for this process's file size limit (ulimit -f) or the file system: "
        "raise the limit; the previous last.pt is intact"
    ], proc.stderr
    assert checkpointing.read(path)["progress"] == {"epoch": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_temp_files_of_a_killed_writer_are_removed(tmp_path: Path) -> None:
    (tmp_path / ".last.pt.tmp").write_bytes(b"half")
    (tmp_path / "last.pt").write_bytes(b"kept")
    assert remove_stale_temps(tmp_path) == [tmp_path / ".last.pt.tmp"]
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


@pytest.mark.parametrize(
    "obj",
    [
        {"model": {}},
        {"format_version": 99, "model": {}},
        {"format_version": checkpointing.FORMAT_VERSION},
        torch.zeros(2),
        [1, 2],
    ],
    ids=["no-version", "future-version", "no-model", "tensor", "list"],
)
def test_load_rejects_what_is_not_a_checkpoint_of_this_template(tmp_path: Path, obj) -> None:
    path = tmp_path / "other.pt"
    torch.save(obj, path)
    with pytest.raises(UserError, match=rf"other\.pt is not a format-{checkpointing.FORMAT_VERSION} checkpoint"):
        checkpointing.read(path)


# --------------------------------------------------------------------------- load_model_state
def test_load_model_state_names_missing_keys() -> None:
    small = nn.Sequential(nn.Linear(4, 3))
    bigger = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    with pytest.raises(UserError, match=r"missing keys \['1\.weight', '1\.bias'\]"):
        checkpointing.load_model_state(bigger, small.state_dict())


def test_load_model_state_names_unexpected_keys() -> None:
    small = nn.Sequential(nn.Linear(4, 3))
    bigger = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    with pytest.raises(UserError, match=r"unexpected keys \['1\.weight', '1\.bias'\].*another model config"):
        checkpointing.load_model_state(small, bigger.state_dict())


def test_load_model_state_names_shape_mismatches() -> None:
    # Same architecture, other num_classes: the commonest mismatch. A UserError, not torch's RuntimeError.
    with pytest.raises(UserError, match=r"2\.weight.*\(3, 8\).*\(5, 8\)"):
        checkpointing.load_model_state(_net(out_features=5), _net(out_features=3).state_dict())


def test_load_model_state_non_strict_loads_what_fits(caplog: pytest.LogCaptureFixture) -> None:
    source = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    target = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 5))
    with caplog.at_level(logging.WARNING, logger="lab.checkpointing.state_dicts"):
        checkpointing.load_model_state(target, {**source.state_dict(), "extra": torch.ones(1)}, strict=False)
    torch.testing.assert_close(target[0].weight, source[0].weight)
    assert "extra" in caplog.text and "1.weight" in caplog.text
