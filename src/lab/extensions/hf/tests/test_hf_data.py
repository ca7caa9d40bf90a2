"""data=hf (data.py): a save_to_disk folder and a prepared CSV give data=csv's rows; prepare resumes where it was
interrupted; a partial, stale or damaged folder and a wrong schema are refused in one line."""

from __future__ import annotations

import importlib
import json
import pickle
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler

from lab.data.options import CsvConfig
from lab.errors import ConfigError, UserError
from lab.extensions.hf import data as hf
from lab.extensions.hf.options import HfDataConfig

ROWS, PART_ROWS = 3000, 700  # 5 parts, the last one short


def _write_csv(path: Path, rows: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lines = ["a,b,c,label,price"]
    # b: integers (read as float64 by prepare), label: names, price: a value
    lines += [
        f"{rng.normal():.6f},{i % 7},{rng.normal() * 5 + 2:.4f},{'xyz'[i % 3]},{rng.normal() * 3:.3f}"
        for i in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _cfg(path: Path, **keys) -> HfDataConfig:
    return HfDataConfig(path=str(path), **{"target": "price", "target_type": "value", **keys})


def _all(split) -> tuple[torch.Tensor, torch.Tensor]:
    return split.batch(list(range(len(split))))


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict[str, Path]:
    """A CSV and the folder prepare made of it, in parts of PART_ROWS rows."""
    root = tmp_path_factory.mktemp("hf")
    csv = _write_csv(root / "table.csv", ROWS)
    _cfg(root / "prepared", source=str(csv), rows_per_part=PART_ROWS).prepare()
    return {"csv": csv, "prepared": root / "prepared", "root": root}


def test_a_save_to_disk_dict_gives_its_rows_standardised_with_train_statistics(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    features = datasets.Features(
        {
            "x0": datasets.Value("float32"),
            "x1": datasets.Value("int64"),
            "note": datasets.Value("string"),
            "kind": datasets.ClassLabel(names=["cat", "dog", "eel"]),
            "y": datasets.Value("float64"),
        }
    )

    def split(n: int) -> datasets.Dataset:
        rows = {
            "x0": rng.normal(size=n).astype(np.float32),
            "x1": rng.integers(0, 9, n),
            "note": ["n"] * n,
            "kind": rng.integers(0, 3, n),
            "y": rng.normal(size=n) * 4 + 1,
        }
        return datasets.Dataset.from_dict(rows, features=features)

    source = datasets.DatasetDict({"train": split(200), "validation": split(40), "test": split(30)})
    source.save_to_disk(str(tmp_path / "saved"))

    value = _cfg(tmp_path / "saved", target="y").build()
    train = np.stack([source["train"]["x0"], source["train"]["x1"]], 1).astype(np.float64)
    mean, std = train.mean(0), train.std(0)
    assert value.meta["feature_names"] == ["x0", "x1"]  # the numeric columns but the target: not note (text)
    assert value.meta["feature_mean"] == pytest.approx(mean.tolist()) and value.meta["target_mean"] == pytest.approx(
        np.mean(source["train"]["y"])
    )
    for name, part in (("train", value.train), ("validation", value.val), ("test", value.test)):
        raw = np.stack([source[name]["x0"], source[name]["x1"]], 1).astype(np.float64)
        x, y = _all(part)
        assert torch.allclose(x, torch.from_numpy((raw - mean) / std).float(), atol=1e-6)
        expected_y = (np.asarray(source[name]["y"]) - value.meta["target_mean"]) / value.meta["target_std"]
        assert torch.allclose(y, torch.from_numpy(expected_y).float(), atol=1e-6)
    item = value.train[5]
    assert item[0].dtype == torch.float32 and item[0].shape == (2,) and item[1].dtype == torch.float32

    labels = _cfg(tmp_path / "saved", target="kind", target_type="class", inputs=["x0"]).build()
    assert labels.meta["class_names"] == ["cat", "dog", "eel"] and labels.meta["num_outputs"] == 3
    assert _all(labels.test)[1].tolist() == source["test"]["kind"]
    torch.save(labels.meta, tmp_path / "meta.pt")  # a checkpoint's data_meta: plain types only
    assert torch.load(tmp_path / "meta.pt", weights_only=True) == labels.meta


@pytest.mark.parametrize("target_type", ["value", "class"])
def test_a_prepared_csv_gives_data_csvs_rows(table, target_type: str) -> None:
    assert len(json.loads((table["prepared"] / "manifest.json").read_text())["parts"]) == 5
    target = "price" if target_type == "value" else "label"
    keys = {"target": target, "target_type": target_type}
    ours = _cfg(table["prepared"], source=str(table["csv"]), **keys).build()
    theirs = CsvConfig(path=str(table["csv"]), features=["a", "b", "c"] + ["price"] * (target == "label"), **keys)
    theirs = theirs.build()
    assert ours.meta.keys() == theirs.meta.keys()
    for key, value in theirs.meta.items():
        assert ours.meta[key] == (pytest.approx(value, rel=1e-9) if "mean" in key or "std" in key else value), key
    for split in ("train", "val", "test"):
        x, y = _all(getattr(ours, split))
        # the same split (data=csv's train_val_test) and, standardised alike, the same floats
        assert torch.allclose(x, getattr(theirs, split).features, atol=1e-6)
        assert torch.allclose(y.double(), getattr(theirs, split).targets.double(), atol=1e-6)
    assert isinstance(ours.train.train_sampler(0, 1, 5), hf.RankPermutation)  # training's order (Parallel asks)
    batch = ours.train.__getitems__([3, 0, 2999 - 1000])
    assert torch.equal(batch[0][0], ours.train[3][0]) and torch.equal(batch[1][1], ours.train[0][1])
    # what a spawned DataLoader worker gets: the table as its files (mapped again there), not copies of its columns
    pickled = pickle.dumps(ours.train)
    assert len(pickled) < ours.train.rows.nbytes + 10_000 < ours.train.table.data.nbytes / 3
    assert torch.equal(pickle.loads(pickled).batch([5, 9])[0], ours.train.batch([5, 9])[0])


@pytest.mark.parametrize(("n", "world_size"), [(1000, 1), (13, 2), (10, 3), (2, 3)])
def test_the_training_order_is_distributed_samplers_without_its_list(n: int, world_size: int) -> None:
    dataset = range(n)
    for rank in range(world_size):
        ours = hf.RankPermutation(n, rank, world_size, seed=7)
        theirs = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=7)
        for epoch in (0, 3):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_an_interrupted_prepare_resumes_to_the_same_files(table, tmp_path: Path, monkeypatch) -> None:
    calls, write = [], hf.write_part

    def fails_once(path, schema, batches):
        calls.append(path)
        if len(calls) == 3:
            next(batches)  # mid-part, as a kill would
            raise KeyboardInterrupt
        return write(path, schema, batches)

    cfg = _cfg(tmp_path / "out", source=str(table["csv"]), rows_per_part=PART_ROWS)
    monkeypatch.setattr(hf, "write_part", fails_once)
    with pytest.raises(KeyboardInterrupt):
        cfg.prepare()
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["data-00000.arrow", "data-00001.arrow", "parts.jsonl"]
    with pytest.raises(ConfigError, match=r"is a partial prepare .*run the same prepare again"):
        cfg.build()
    cfg.prepare()  # resumes: the two parts written stay, the rest is written
    assert len(calls) == 6
    done = json.loads((tmp_path / "out/manifest.json").read_text())["parts"]
    whole = json.loads((table["prepared"] / "manifest.json").read_text())["parts"]
    assert done == whole  # names, sizes, sha256 and row counts of an uninterrupted prepare
    cfg.verify()


def _stale(table, tmp_path: Path) -> HfDataConfig:
    csv = _write_csv(tmp_path / "small.csv", 50)
    _cfg(tmp_path / "p", source=str(csv)).prepare()
    with csv.open("a") as f:
        f.write("0,1,2,x,3\n")
    return _cfg(tmp_path / "p", source=str(csv))


def _damaged(table, tmp_path: Path) -> HfDataConfig:
    shutil.copytree(table["prepared"], tmp_path / "p")
    with (tmp_path / "p/data-00002.arrow").open("r+b") as f:
        f.truncate(100)
    return _cfg(tmp_path / "p")


def _empty_cell(table, tmp_path: Path) -> HfDataConfig:
    csv = tmp_path / "holes.csv"
    csv.write_text("a,price\n" + "1.5,2\n" * 20 + ",3\n" + "2.5,4\n" * 20)
    _cfg(tmp_path / "p", source=str(csv)).prepare()
    return _cfg(tmp_path / "p", source=str(csv))


CASES = {
    "empty_cell": (_empty_cell, r"train split, row 20 \(from 0\): column 'a' is empty; fill or drop the rows"),
    "stale": (_stale, "is stale: .*small.csv has changed since it was prepared; prepare it again"),
    "damaged": (_damaged, "is damaged: data-00002.arrow has 100 bytes, the manifest says"),
    "missing": (lambda t, p: _cfg(p / "nothing"), "does not exist; prepare it with: python scripts/prepare_data"),
    "no_target": (lambda t, p: _cfg(t["prepared"], target=None), r"needs data.target=.*columns .*: a \(double\)"),
    "target_column": (
        lambda t, p: _cfg(t["prepared"], target="cost"),
        r"data.target='cost' is not a column of data.path=.*; its columns: a \(double\), b \(double\), c \(double\), "
        r"label \(string\), price \(double\)$",
    ),
    "input_column": (lambda t, p: _cfg(t["prepared"], inputs=["a", "z"]), r"data.inputs \['z'\] are not columns"),
    "text_input": (
        lambda t, p: _cfg(t["prepared"], inputs=["a", "label"]),
        "column 'label' of .* is string, not numeric; its numeric columns: a, b, c, price$",
    ),
    "text_regression_target": (lambda t, p: _cfg(t["prepared"], target="label"), "is string, not a number"),
    "float_classes": (
        lambda t, p: _cfg(t["prepared"], target="price", target_type="class"),
        "holds non-integer numbers .* use task=regression",
    ),
    "not_a_dataset": (lambda t, p: _cfg(t["root"]), "is neither a folder Dataset.save_to_disk wrote"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_cannot_be_read_is_refused_in_one_line(table, tmp_path: Path, case: str) -> None:
    make, message = CASES[case]
    with pytest.raises(ConfigError, match=message) as err:
        make(table, tmp_path).build()
    assert "\n" not in str(err.value)


def test_prepare_refuses_what_it_cannot_convert(table, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "dup.csv").write_text("a,a,y\n1,2,3\n")
    (tmp_path / "empty.csv").write_text("a,y\n")
    for source, message in (
        (None, "set data.source=<file.csv>"),
        (tmp_path / "none.csv", "is not a file"),
        (tmp_path / "dup.csv", "the header names column\\(s\\) 'a' more than once"),
        (tmp_path / "empty.csv", "has no data rows"),
    ):
        with pytest.raises(ConfigError, match=message):
            _cfg(tmp_path / "out", source=source and str(source)).prepare()
        assert not (tmp_path / "out").exists()
    # a value that is not of its column's type, blocks after the first: named with the column, after some parts
    monkeypatch.setattr(hf, "CSV_BLOCK", 1 << 12)
    (tmp_path / "late.csv").write_text("a,y\n" + "1.5,2\n" * 2000 + "oops,3\n")
    with pytest.raises(UserError, match=r"late.csv, in the rows after \d+: In CSV column 'a': .*invalid value 'oops'"):
        _cfg(tmp_path / "late", source=str(tmp_path / "late.csv"), rows_per_part=500).prepare()
    with pytest.raises(ConfigError, match="is not empty and was not written by a prepare"):
        _cfg(table["root"], source=str(table["csv"])).prepare()
    with pytest.raises(ConfigError, match=r"data\.loader=device would hold all of it"):
        _cfg(tmp_path, loader="device")


def test_the_memory_bench_measures_its_work_in_a_forked_child(tmp_path: Path, monkeypatch) -> None:
    """bench_table_memory.py (minutes at its sizes, README.md here): its CSV, and a prepare and an epoch each measured
    in a child process of its own (a fork: no new interpreter)."""
    monkeypatch.setenv("TQDM_DISABLE", "1")  # what the bench sets, undone after the test
    bench = importlib.import_module("lab.extensions.hf.bench_table_memory")
    rows = bench.write_csv(tmp_path / "t.csv", 0.3)
    assert 0.3e6 <= (tmp_path / "t.csv").stat().st_size < 0.5e6
    prepared = bench.in_child(bench.prepare, tmp_path / "t.csv", tmp_path / "arrow")
    assert prepared["hwm"] > 0 and prepared["anon"] >= prepared["start_anon"] > 0 and prepared["seconds"] > 0
    cfg = _cfg(tmp_path / "arrow", target="target")
    cfg.batch_size = 64
    read = bench.in_child(bench.epoch, cfg)
    assert read["samples"] == len(cfg.build().train) // 64 * 64 and read["samples"] > 0.6 * rows
