"""Sharded checkpoints (lab.checkpointing.sharded, the CheckpointManager's sharded saves), in one process: the DCP
directory a save writes, last.pt switched only once it is complete, background saves, what a killed save leaves,
reading the model back whole, and resuming the weights and optimizer moments bitwise."""

from __future__ import annotations

import logging
import pickle
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter

from lab import checkpointing
from lab.checkpointing import CheckpointManager, sharded
from lab.config import validate
from lab.config.training import TrainerConfig
from lab.distributed.parallel import Parallel
from lab.errors import ConfigError, UserError
from lab.run_dir import _refuse_unresumable
from lab.training.state import epoch_position


def _model_and_optimizer(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    return model, optimizer


def _train_a_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(5, 4)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def _state(model: nn.Module, optimizer: torch.optim.Optimizer, step: int, consolidate: bool = False) -> dict:
    """What TrainingState.payload gives under FSDP (here the tensors are whole: one process)."""
    state: dict[str, Any] = {
        "shards": Parallel().sharded_state(model, optimizer),
        "progress": {"epoch": 0, "global_step": step, "batch_in_epoch": step},
        "rng": checkpointing.capture_rng(),
    }
    if consolidate:
        state["model"] = model.state_dict()
    return state


def _named(manager: CheckpointManager) -> str:
    return torch.load(manager.last, weights_only=True)["shards"]


def _assert_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_sharded_save_names_its_complete_directory_and_replaces_the_previous_one(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel(), extras={"config": {"toy": 1}})
    manager.save(_state(model, optimizer, 1), best=False)
    first = _named(manager)
    assert first == "shards/step-000000001" and sharded.is_complete(manager.dir / first)
    _train_a_step(model, optimizer)
    manager.save(_state(model, optimizer, 2, consolidate=True), best=True)
    ckpt = checkpointing.read(manager.last)
    assert ckpt["shards"] == str(manager.dir / "shards/step-000000002")  # absolute once read
    assert "model" not in ckpt and "optimizer" not in ckpt and ckpt["config"] == {"toy": 1}
    assert [p.name for p in (manager.dir / "shards").iterdir()] == ["step-000000002"]  # the superseded one removed
    _assert_equal(sharded.model_weights(ckpt), model.state_dict())  # read back whole, in one process
    best = checkpointing.read(manager.best)  # one consolidated file of the model: what eval/export/infer read
    assert "shards" not in best and "optimizer" not in best
    _assert_equal(best["model"], model.state_dict())


def test_the_final_save_consolidates_the_model_into_last_pt_too(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 3, consolidate=True), best=False, final=True)
    ckpt = checkpointing.read(manager.last)
    _assert_equal(ckpt["model"], model.state_dict())
    assert sharded.is_complete(ckpt["shards"]) and not manager.best.exists()


def test_the_same_step_saved_twice_gets_a_directory_of_its_own(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 4), best=False)
    manager.save(_state(model, optimizer, 4), best=False)  # a stop signal right after a periodic save
    assert _named(manager) == "shards/step-000000004.1"


def test_resuming_from_shards_restores_weights_and_optimizer_moments_bitwise(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    for _ in range(3):
        _train_a_step(model, optimizer)
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 3), best=False)
    fresh, fresh_optimizer = _model_and_optimizer(seed=1)
    Parallel().load_sharded_state(fresh, fresh_optimizer, checkpointing.read(manager.last)["shards"])
    _assert_equal(fresh.state_dict(), model.state_dict())
    for a, b in zip(fresh_optimizer.state.values(), optimizer.state.values()):
        _assert_equal(a, b)
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    # and training goes on identically
    torch.manual_seed(7)
    _train_a_step(model, optimizer)
    torch.manual_seed(7)
    _train_a_step(fresh, fresh_optimizer)
    _assert_equal(fresh.state_dict(), model.state_dict())


@pytest.fixture
def held_metadata(monkeypatch):
    """DCP's last act, writing `.metadata`, waits for the returned event: a save caught between its shards and its
    completion (where a kill would leave it)."""
    release = threading.Event()
    finish = FileSystemWriter.finish

    def held(self, *args, **kwargs):
        assert release.wait(60), "the test never released the save"
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(FileSystemWriter, "finish", held)
    return release


def test_a_background_save_switches_last_pt_only_once_complete(tmp_path: Path, held_metadata) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel(), async_save=True)
    held_metadata.set()
    manager.save(_state(model, optimizer, 1), best=False)
    manager.wait()
    held_metadata.clear()
    _train_a_step(model, optimizer)
    manager.save(_state(model, optimizer, 2), best=False)  # returns with the write in flight
    in_flight = manager.dir / "shards/step-000000002"
    assert _named(manager) == "shards/step-000000001" and not sharded.is_complete(in_flight)
    _train_a_step(model, optimizer)  # training goes on: the save wrote copies of the tensors
    held_metadata.set()
    manager.wait()
    assert _named(manager) == "shards/step-000000002" and sharded.is_complete(in_flight)
    assert not (manager.dir / "shards/step-000000001").exists()
    saved = sharded.model_weights(checkpointing.read(manager.last))
    assert not all(torch.equal(saved[k], v) for k, v in model.state_dict().items())  # step 2's weights, not 3's


def test_a_save_killed_before_completion_leaves_the_previous_checkpoint_and_is_removed_at_the_next_start(
    tmp_path: Path, caplog
) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 1), best=False)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    # a killed save's directory: shards written, no metadata
    killed = manager.dir / "shards/step-000000002"
    killed.mkdir()
    (killed / "__0_0.distcp").write_bytes(b"partial")
    users = manager.dir / "shards" / "notes.txt"  # not a save's: never removed
    users.write_text("mine")
    _assert_equal(sharded.model_weights(checkpointing.read(manager.last)), weights)
    with caplog.at_level(logging.WARNING):
        CheckpointManager(tmp_path, Parallel())
    assert not killed.exists() and sharded.is_complete(manager.dir / _named(manager))
    assert users.read_text() == "mine"
    assert "shards of a save that never completed" in caplog.text


def test_a_checkpoint_whose_shards_are_missing_is_refused_in_one_line(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 1), best=False)
    (manager.dir / _named(manager) / ".metadata").unlink()
    with pytest.raises(UserError, match=r"sharded weights and optimizer state .* are missing or incomplete"):
        checkpointing.read(manager.last)


def test_resuming_from_a_model_only_best_pt_is_refused_naming_last_pt_and_init_from(tmp_path: Path) -> None:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 1, consolidate=True), best=True)
    run = SimpleNamespace(trainer=OmegaConf.structured(TrainerConfig(max_epochs=5)), callbacks={}, model=None)
    with pytest.raises(UserError, match=r"holds the model weights alone .* resume from last.pt, .*model.init_from="):
        _refuse_unresumable(SimpleNamespace(**vars(run), ckpt_path=str(manager.best)), writer=True)
    _refuse_unresumable(SimpleNamespace(**vars(run), ckpt_path=str(manager.last)), writer=True)  # sharded: resumes


@pytest.mark.parametrize(
    ("saved", "now", "expected"),
    [
        ((32, 2), (64, 1), 6),  # 2 ranks x 32 -> 1 x 64: the same samples
        ((32, 2), (32, 1), 12),  # the batch halves: twice the batches
        ((32, 1), (32, 2), 3),  # 1 -> 2 ranks: half, rounded down (a sample seen twice, none missed)
        ((32, 2), (32, 2), 6),  # unchanged
    ],
)
def test_a_mid_epoch_position_carries_over_in_samples_to_another_global_batch(saved, now, expected) -> None:
    batch, world = saved
    rng = {"per_rank": [{}] * world} if world > 1 else {}
    ckpt = {
        "progress": {"batch_in_epoch": 6 if world == 2 else 7},
        "rng": rng,
        "config": {"data": {"batch_size": batch}},
    }
    assert epoch_position(ckpt, *now) == expected


def test_async_save_without_fsdp_is_refused_at_configuration_time(compose) -> None:
    with pytest.raises(ConfigError, match=r"trainer.async_save .* only dist=fsdp makes"):
        validate(compose(["dist=ddp", "trainer.async_save=true"]))
    validate(compose(["dist=fsdp", "trainer.async_save=true"]))


def test_model_init_from_reads_the_weights_of_a_sharded_checkpoint(tmp_path: Path) -> None:
    from lab.models.pretrained import read_weights

    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    manager.save(_state(model, optimizer, 1), best=False)  # a periodic save: no model in last.pt
    _assert_equal(read_weights(manager.last, "model.init_from"), model.state_dict())


# --------------------------------------------------------------------------- a checkpoint from elsewhere
class _RunsCode:
    """Pickles as a call of exec that writes `marker`: what a malicious DCP `.metadata` holds (the fast tier starts
    no process, so no os.system here)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def _sharded_run(tmp_path: Path) -> CheckpointManager:
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path / "run", Parallel())
    manager.save(_state(model, optimizer, 1), best=False)
    return manager


def test_shards_named_outside_the_checkpoints_own_folder_are_refused_and_never_read(tmp_path: Path) -> None:
    manager = _sharded_run(tmp_path)
    marker = tmp_path / "ran"
    evil = tmp_path / "evil" / "dcp"
    evil.mkdir(parents=True)
    (evil / ".metadata").write_bytes(pickle.dumps(_RunsCode(marker)))
    header = torch.load(manager.last, weights_only=True)
    (manager.dir / "shards" / "link").symlink_to(evil)  # a link in its own folder that leads out of it
    for named in (str(evil), "../../evil/dcp", "shards/../../../evil/dcp", "shards/link", ".", "", 3):
        path = manager.dir / "probe.pt"
        checkpointing.save(path, {**header, "shards": named})
        with pytest.raises(UserError, match=r"names shards=.*which is not a directory inside .*: refused") as err:
            checkpointing.read(path)
        assert "\n" not in str(err.value)
    # shards/ itself a link out of the checkpoints folder
    moved = tmp_path / "elsewhere"
    (manager.dir / "shards").rename(moved)
    (manager.dir / "shards").symlink_to(moved)
    with pytest.raises(UserError, match=r"names shards='shards/step-000000001', which is not a directory inside"):
        checkpointing.read(manager.last)
    # the case: the checkpoint next to the directory it names by its absolute path
    checkpointing.save(evil.parent / "shards_abs.pt", {**header, "shards": str(evil)})
    with pytest.raises(UserError, match=r"names shards=.*: refused"):
        checkpointing.read(evil.parent / "shards_abs.pt")
    assert not marker.exists()


def test_a_shard_directorys_metadata_runs_nothing_it_names(tmp_path: Path) -> None:
    """Its own folder, a file that DCP did not write: refused where the checkpoint is read, and by the reader."""
    from lab.checkpointing import dcp_reading

    manager = _sharded_run(tmp_path)
    directory = manager.dir / _named(manager)
    marker = tmp_path / "ran"
    (directory / ".metadata").write_bytes(pickle.dumps({"storage_data": _RunsCode(marker)}))
    with pytest.raises(UserError, match=r"\.metadata names builtins\.exec, which DCP metadata never holds"):
        checkpointing.read(manager.last)
    with pytest.raises(UserError, match=r"names builtins\.exec"):
        sharded.read_model(directory)
    with pytest.raises(UserError, match=r"names builtins\.exec"):
        dcp_reading.Reader(str(directory)).read_metadata()  # what sharded.load hands DCP
    assert not marker.exists()


def test_metadata_naming_a_data_file_outside_its_directory_is_refused(tmp_path: Path) -> None:
    manager = _sharded_run(tmp_path)
    directory = manager.dir / _named(manager)
    metadata = pickle.loads((directory / ".metadata").read_bytes())
    for info in metadata.storage_data.values():
        info.relative_path = "../../../elsewhere.distcp"
    (directory / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(UserError, match=r"names a data file outside .*'\.\./\.\./\.\./elsewhere\.distcp'"):
        checkpointing.read(manager.last)


def test_a_value_stored_as_bytes_that_is_not_plain_data_is_refused_on_resume(tmp_path: Path) -> None:
    """DCP itself unpickles an optimizer's lr, betas, ... with weights_only=False."""
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path, Parallel())
    marker = tmp_path / "ran"
    state = _state(model, optimizer, 1)
    state["shards"]["optimizer"]["param_groups"][0]["lr"] = _RunsCode(marker)
    manager.save(state, best=False)
    fresh, fresh_optimizer = _model_and_optimizer(seed=1)
    with pytest.raises(UserError, match=r"optimizer\.param_groups\.0\.lr is not plain data: not loaded"):
        Parallel().load_sharded_state(fresh, fresh_optimizer, checkpointing.read(manager.last)["shards"])
    assert not marker.exists()


def test_shards_damaged_past_the_allow_list_are_refused_in_one_line(tmp_path: Path) -> None:
    """Metadata of DCP's own classes holding nonsense, or a data file cut short: a UserError, not a traceback."""
    manager = _sharded_run(tmp_path)
    directory = manager.dir / _named(manager)
    good = (directory / ".metadata").read_bytes()
    metadata = pickle.loads(good)
    metadata.state_dict_metadata = "not a mapping"
    (directory / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(UserError, match=r"cannot read the sharded checkpoint .*AttributeError.*use another checkpoint"):
        sharded.model_weights(checkpointing.read(manager.last))
    (directory / ".metadata").write_bytes(good)
    data = next(directory.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    for read in (
        lambda: sharded.model_weights(checkpointing.read(manager.last)),
        lambda: Parallel().load_sharded_state(*_model_and_optimizer(), checkpointing.read(manager.last)["shards"]),
    ):
        with pytest.raises(UserError, match=r"cannot read the sharded checkpoint .*: damaged") as err:
            read()
        assert "\n" not in str(err.value)
