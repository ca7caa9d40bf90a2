"""lab.data: dataset builders on real on-disk formats written into tmp_path, transforms and loaders (offline)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import signal
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from PIL import Image

from lab.config import ConfigError, options
from lab.data.common import DataModule
from lab.data.datasets import build
from lab.data.loaders import make_loader, seed_worker, worker_deaths
from lab.data.transforms import RandomShiftFlip, eval_transform
from lab.errors import UserError

N_DIGITS = 1797


def data_cfg(name: str = "digits", **overrides) -> DictConfig:
    return OmegaConf.structured(options.option_class("data", name)(**overrides))


@pytest.fixture(scope="module")
def digits() -> DataModule:
    return build(data_cfg())


def all_items(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*dataset.__getitems__(list(range(len(dataset)))))
    return torch.stack(xs), torch.tensor(ys)


# --------------------------------------------------------------------------- digits
def test_digits_items_are_normalized_float_images(digits: DataModule) -> None:
    x, y = digits.train[0]
    assert x.dtype == torch.float32 and x.shape == (1, 8, 8)
    assert isinstance(y, int)
    xs, ys = all_items(digits.train)
    assert abs(xs.mean().item()) < 1e-4 and abs(xs.std().item() - 1) < 1e-3  # train's own statistics
    assert ys.min() >= 0 and ys.max() < 10 and len(ys.unique()) == 10
    assert digits.meta == {
        "input_shape": [1, 8, 8],
        "num_outputs": 10,
        "num_classes": 10,
        "in_channels": 1,
        "image_size": 8,
        "mean": digits.meta["mean"],
        "std": digits.meta["std"],
        "crop_pct": 1.0,  # image files at inference: the shorter side resized to 8, the centre 8x8 kept
        "interpolation": "bilinear",
        "class_names": [str(i) for i in range(10)],
    }


def test_digits_splits_partition_the_data_by_the_fractions(digits: DataModule) -> None:
    splits = [digits.train.source_indices, digits.val.source_indices, digits.test.source_indices]
    assert sum(len(s) for s in splits) == N_DIGITS
    assert torch.cat(splits).unique().numel() == N_DIGITS  # no overlap, nothing lost
    assert abs(len(digits.val) - 0.15 * N_DIGITS) <= 2 and abs(len(digits.test) - 0.15 * N_DIGITS) <= 2


def test_digits_split_depends_only_on_split_seed(digits: DataModule) -> None:
    other_settings = build(data_cfg(batch_size=7, augment=True, mean=[0.5], std=[0.5], num_workers=3))
    reseeded = build(data_cfg(split_seed=1))
    for name in ("train", "val", "test"):
        assert torch.equal(getattr(other_settings, name).source_indices, getattr(digits, name).source_indices)
    assert not torch.equal(reseeded.val.source_indices, digits.val.source_indices)


def test_digits_build_is_deterministic(digits: DataModule) -> None:
    again = build(data_cfg())
    assert torch.equal(all_items(again.val)[0], all_items(digits.val)[0])
    assert again.meta == digits.meta


def test_digits_without_test_fraction_has_no_test_split() -> None:
    dm = build(data_cfg(test_fraction=0.0, val_fraction=0.2))
    assert dm.test is None and len(dm.train) + len(dm.val) == N_DIGITS


def test_config_mean_std_are_used_and_broadcast() -> None:
    dm = build(data_cfg(mean=[0.5], std=[0.25]))
    assert dm.meta["mean"] == [0.5] and dm.meta["std"] == [0.25]
    raw = dm.val.images[0].float() / 16
    assert torch.allclose(dm.val[0][0], (raw - 0.5) / 0.25)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"num_classes": 5}, r"data\.num_classes=5 .* set data\.num_classes=10"),
        ({"image_size": 28}, r"data\.image_size=28 .* set data\.image_size=8"),
        ({"in_channels": 3}, r"data\.in_channels=3 .* set data\.in_channels=1"),
        ({"mean": [0.1, 0.2], "std": [1.0, 1.0]}, r"data\.mean has 2 values"),
    ],
)
def test_digits_config_mismatch_raises(overrides: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        build(data_cfg(**overrides))


def test_a_dataset_read_as_its_files_are_has_nothing_to_prepare_or_verify() -> None:
    """scripts/prepare_data.py calls the option's prepare() (--verify: verify()): refused in one line by the options
    without prepared files, which read their files as they are."""
    cfg = options.instantiate("data", {"name": "digits"})
    for step in (cfg.prepare, cfg.verify):
        with pytest.raises(ConfigError, match=r"^data=digits reads its files as they are: nothing to prepare; [^\n]+$"):
            step()


def test_meta_survives_weights_only_load(digits: DataModule, tmp_path: Path) -> None:
    torch.save({"meta": digits.meta}, tmp_path / "m.pt")
    assert torch.load(tmp_path / "m.pt", weights_only=True)["meta"] == digits.meta


def test_digits_augment_changes_train_only() -> None:
    dm = build(data_cfg(augment=True))
    torch.manual_seed(0)
    batch = torch.stack([x for x, _ in dm.train.__getitems__(list(range(64)))])
    plain = (dm.train.images[:64].float() / 16 - dm.train.mean[0]) / dm.train.std[0]
    assert batch.shape == plain.shape and not torch.allclose(batch, plain)
    assert torch.equal(dm.val[3][0], dm.val[3][0])


# --------------------------------------------------------------------------- transforms
def test_eval_transform_reproduces_digits_tensors(digits: DataModule) -> None:
    mean, std = digits.meta["mean"][0], digits.meta["std"][0]
    transform = eval_transform(digits.meta)
    for i in range(20):
        x, _ = digits.val[i]
        pixels = ((x[0] * std + mean) * 255).round().clamp(0, 255).to(torch.uint8).numpy()
        assert torch.allclose(transform(Image.fromarray(pixels, mode="L")), x, atol=1e-2)


def test_eval_transform_accepts_any_mode_and_size(digits: DataModule) -> None:
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 20, 4), dtype=np.uint8), mode="RGBA")
    x = eval_transform(digits.meta)(img)
    assert x.dtype == torch.float32 and x.shape == (1, 8, 8)
    rgb = eval_transform({**digits.meta, "in_channels": 3, "image_size": 5, "mean": [0.5] * 3, "std": [0.5] * 3})
    assert rgb(img).shape == (3, 5, 5)


def test_eval_transform_rescales_16_bit_grayscale(digits: DataModule) -> None:
    unit = eval_transform({**digits.meta, "mean": [0.0], "std": [1.0]})  # output = pixel value in [0,1]
    white, grey = (Image.fromarray(np.full((8, 8), v, dtype=np.uint16)) for v in (65535, 128 * 257))
    assert torch.allclose(unit(white), torch.ones(1, 8, 8))
    assert torch.allclose(unit(grey), torch.full((1, 8, 8), 128 / 255))  # PIL's own convert("L") gives 255


def test_random_shift_flip_moves_each_sample_by_its_own_offset() -> None:
    torch.manual_seed(0)
    x = torch.rand(16, 2, 6, 6)
    out = RandomShiftFlip(padding=2, flip=False)(x)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    crops = padded.unfold(2, 6, 1).unfold(3, 6, 1)  # (N,C,5,5,6,6): every possible 6x6 crop
    for i in range(16):
        assert any(torch.equal(out[i], crops[i, :, a, b]) for a in range(5) for b in range(5))
    flipped = RandomShiftFlip(padding=0, flip=True)(x)
    assert all(torch.equal(f, s) or torch.equal(f, s.flip(-1)) for f, s in zip(flipped, x))
    assert not torch.equal(flipped, x)


# --------------------------------------------------------------------------- mnist / fashion_mnist
def write_idx(raw: Path, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    raw.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, h, w) + images.tobytes())
    (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


@pytest.mark.parametrize(
    ("name", "folder", "mean"), [("mnist", "MNIST", 0.1307), ("fashion_mnist", "FashionMNIST", 0.2860)]
)
def test_mnist_family_reads_raw_idx_files(tmp_path: Path, name: str, folder: str, mean: float) -> None:
    rng = np.random.default_rng(0)
    train_x, test_x = (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for n in (40, 12))
    train_y, test_y = np.arange(40, dtype=np.uint8) % 10, np.arange(12, dtype=np.uint8) % 10
    write_idx(tmp_path / folder / "raw", "train", train_x, train_y)
    write_idx(tmp_path / folder / "raw", "t10k", test_x, test_y)

    dm = build(data_cfg(name=name, root=str(tmp_path), image_size=28, val_fraction=0.25))
    assert (len(dm.train), len(dm.val), len(dm.test)) == (30, 10, 12)
    assert dm.meta["mean"] == [mean] and dm.meta["image_size"] == 28 and len(dm.meta["class_names"]) == 10
    x, y = dm.test[5]
    expected = (torch.from_numpy(test_x[5]).float() / 255 - mean) / dm.meta["std"][0]
    assert x.shape == (1, 28, 28) and y == 5 and torch.allclose(x[0], expected)
    assert sorted(torch.cat([dm.train.source_indices, dm.val.source_indices]).tolist()) == list(range(40))


def test_mnist_missing_files_say_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"MNIST.raw.*data\.download=true"):
        build(data_cfg(name="mnist", root=str(tmp_path), image_size=28))


# --------------------------------------------------------------------------- cifar10
def write_cifar(root: Path, per_batch: int = 6, n_test: int = 10) -> np.ndarray:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    test_data = None
    for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch", n_test)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        batch = {
            b"batch_label": name.encode(),
            b"labels": [i % 10 for i in range(n)],
            b"data": data,
            b"filenames": [f"{i}.png".encode() for i in range(n)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
        test_data = data
    names = [
        n.encode() for n in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    ]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names, b"num_vis": 3072}, protocol=2))
    return test_data


def test_cifar10_reads_python_batches(tmp_path: Path) -> None:
    test_data = write_cifar(tmp_path)
    cfg = data_cfg(name="cifar10", root=str(tmp_path), in_channels=3, image_size=32, val_fraction=0.2, augment=True)
    dm = build(cfg)
    assert (len(dm.train), len(dm.val), len(dm.test)) == (24, 6, 10)
    assert dm.meta["class_names"][0] == "airplane" and dm.meta["mean"] == [0.4914, 0.4822, 0.4465]
    x, y = dm.test[3]
    raw = torch.from_numpy(test_data[3]).view(3, 32, 32).float() / 255
    expected = (raw - torch.tensor(dm.meta["mean"]).view(3, 1, 1)) / torch.tensor(dm.meta["std"]).view(3, 1, 1)
    assert x.shape == (3, 32, 32) and y == 3 and torch.allclose(x, expected)
    assert torch.equal(dm.val[0][0], dm.val[0][0])  # no augmentation outside train
    torch.manual_seed(0)
    assert not torch.equal(dm.train[0][0], dm.train[0][0])  # crop + flip differ between draws


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.parametrize("planted", ["data_batch_3", "batches.meta"])
@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar10_batches_run_nothing_they_name(tmp_path: Path, planted: str, protocol: int) -> None:
    """The batches are pickles: read with an allow-list (arrays, in either numpy's spelling and either pickle
    protocol), a planted one is refused in one line before anything it names is called."""
    write_cifar(tmp_path / "fine")
    for name in ("data_batch_1", "batches.meta"):  # the arrays as pickle protocol 5 writes them: still read
        path = tmp_path / "fine" / "cifar-10-batches-py" / name
        path.write_bytes(pickle.dumps(pickle.loads(path.read_bytes()), protocol=protocol))
    cfg = data_cfg(name="cifar10", root=str(tmp_path / "fine"), in_channels=3, image_size=32, val_fraction=0.2)
    assert len(build(cfg).train) == 24
    write_cifar(tmp_path / "evil")
    marker = tmp_path / "marker"
    batch = {b"data": _RunsCode(marker), b"labels": [0], b"label_names": [b"x"]}
    (tmp_path / "evil" / "cifar-10-batches-py" / planted).write_bytes(pickle.dumps(batch, protocol=protocol))
    cfg = data_cfg(name="cifar10", root=str(tmp_path / "evil"), in_channels=3, image_size=32)
    with pytest.raises(ConfigError, match=rf"{planted} is not a CIFAR-10 python batch \(it names .*can run code"):
        build(cfg)
    assert not marker.exists()


def test_cifar10_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cifar-10-batches-py.*data\.download=true"):
        build(data_cfg(name="cifar10", root=str(tmp_path), in_channels=3, image_size=32))
    with pytest.raises(ConfigError, match=r"data\.in_channels=1"):
        build(data_cfg(name="cifar10", root=str(tmp_path), in_channels=1, image_size=32))


# --------------------------------------------------------------------------- image_folder
def write_folder(root: Path, splits: dict[str, dict[str, int]]) -> None:
    rng = np.random.default_rng(0)
    for split, classes in splits.items():
        for cls, n in classes.items():
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / cls / f"{i}.{'png' if i % 2 else 'jpg'}")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_folder(tmp_path, {"train": {"dog": 3, "cat": 3}, "val": {"dog": 2, "cat": 2}})
    return tmp_path


def test_image_folder_items_match_eval_transform(folder: Path) -> None:
    dm = build(data_cfg(name="image_folder", root=str(folder), in_channels=3, image_size=8, augment=True))
    assert dm.meta["class_names"] == ["cat", "dog"] and dm.meta["mean"] == [0.5] * 3
    assert (len(dm.train), len(dm.val), dm.test) == (6, 4, None)
    transform = eval_transform(dm.meta)
    for i, (path, label) in enumerate(dm.val.samples):
        x, y = dm.val[i]
        assert x.dtype == torch.float32 and x.shape == (3, 8, 8) and y == label
        assert torch.equal(x, transform(Image.open(path)))
    assert dm.train[0][0].shape == (3, 8, 8)


def test_image_folder_grayscale_and_test_split(folder: Path) -> None:
    write_folder(folder, {"test": {"dog": 1, "cat": 1}})
    dm = build(data_cfg(name="image_folder", root=str(folder), in_channels=1, image_size=6))
    assert dm.train[0][0].shape == (1, 6, 6) and len(dm.test) == 2


def test_image_folder_errors(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(ConfigError, match=r"train does not exist.*<class>"):
        build(data_cfg(name="image_folder", root=str(empty), in_channels=3))
    with pytest.raises(ConfigError, match=r"data\.num_classes=3"):
        build(data_cfg(name="image_folder", root=str(folder), in_channels=3, num_classes=3))
    write_folder(folder, {"val": {"bird": 1}})
    with pytest.raises(ConfigError, match="same class sub-folders"):
        build(data_cfg(name="image_folder", root=str(folder), in_channels=3))


def test_image_folder_without_val_holds_out_a_stratified_seeded_fraction(tmp_path: Path) -> None:
    write_folder(tmp_path, {"train": {"dog": 10, "cat": 6}})
    cfg = data_cfg(name="image_folder", root=str(tmp_path), in_channels=3, image_size=8, val_fraction=0.25)
    dm = build(cfg)
    train, val = [path for path, _ in dm.train.samples], [path for path, _ in dm.val.samples]
    assert len(val) == 4 and not set(train) & set(val) and len(train) + len(val) == 16
    assert {label for _, label in dm.val.samples} == {0, 1}  # stratified: every class held out
    assert [path for path, _ in build(cfg).val.samples] == val  # the same files for every run and its eval
    other = data_cfg(name="image_folder", root=str(tmp_path), in_channels=3, val_fraction=0.25, split_seed=1)
    built = build(other)
    assert [path for path, _ in built.val.samples] != val
    assert built.meta["image_size"] == 64  # no size set, no pretrained model: the default


def test_eval_transform_resizes_the_shorter_side_and_keeps_the_centre() -> None:
    # a 40 x 20 (w x h) image: the left and right quarters red, the middle half blue
    pixels = np.zeros((20, 40, 3), dtype=np.uint8)
    pixels[:, :10, 0] = pixels[:, 30:, 0] = 255
    pixels[:, 10:30, 2] = 255
    meta = {"in_channels": 3, "image_size": 10, "mean": [0.0] * 3, "std": [1.0] * 3, "crop_pct": 1.0}
    x = eval_transform({**meta, "interpolation": "nearest"})(Image.fromarray(pixels))
    assert x.shape == (3, 10, 10) and torch.all(x[2] == 1) and torch.all(x[0] == 0)  # the blue centre, undistorted
    expected = Image.fromarray(pixels).resize((20, 10), Image.Resampling.BICUBIC).crop((5, 0, 15, 10))
    x = eval_transform({**meta, "interpolation": "bicubic"})(Image.fromarray(pixels))
    assert torch.equal(x, torch.from_numpy(np.asarray(expected).copy()).permute(2, 0, 1).float() / 255)
    # crop_pct 0.5: the shorter side resized to 20, the centre 10 x 10 kept (a margin, as pretrained models were
    # evaluated); a checkpoint from before crop_pct squashed the image to a square, and still does
    assert eval_transform({**meta, "crop_pct": 0.5})(Image.fromarray(pixels)).shape == (3, 10, 10)
    squashed = eval_transform({k: v for k, v in meta.items() if k != "crop_pct"})(Image.fromarray(pixels))
    assert squashed[0, :, 0].mean() == 1  # the red left edge is still in view


# --------------------------------------------------------------------------- synthetic
def test_synthetic_follows_config_and_split_seed() -> None:
    cfg = dict(in_channels=3, image_size=4, num_samples=100, val_fraction=0.1)
    dm = build(data_cfg("synthetic", **cfg))
    assert (len(dm.train), len(dm.val), len(dm.test)) == (100, 10, 10)
    assert dm.meta["num_classes"] == 10 and dm.meta["mean"] == [0.0] * 3 and dm.meta["std"] == [1.0] * 3
    assert dm.train[0][0].shape == (3, 4, 4)
    assert torch.equal(build(data_cfg("synthetic", **cfg)).train.images, dm.train.images)
    assert not torch.equal(build(data_cfg("synthetic", **cfg, split_seed=1)).train.images, dm.train.images)
    assert build(data_cfg("synthetic", num_classes=3, num_samples=50)).train.labels.max() < 3
    augmented = build(data_cfg("synthetic", **cfg, augment=True))  # CIFAR's crop and flip, train split only
    assert torch.equal(augmented.train.images, dm.train.images) and augmented.val.augment is None
    assert not torch.equal(augmented.train.fetch(torch.arange(100))[0], dm.train.images)


# --------------------------------------------------------------------------- loaders
@pytest.fixture(scope="module")
def tiny() -> DataModule:
    return build(data_cfg("synthetic", in_channels=1, image_size=2, num_samples=10, val_fraction=0.3))


def test_make_loader_drops_last_batch_only_in_training(tiny: DataModule) -> None:
    cfg = data_cfg(batch_size=4, eval_batch_size=3)
    train = list(make_loader(tiny.train, cfg, train=True, generator=torch.Generator(), pin_memory=False))
    assert [len(y) for _, y in train] == [4, 4]
    assert train[0][0].shape == (4, 1, 2, 2) and train[0][1].dtype == torch.int64
    evaluation = list(make_loader(tiny.train, cfg, train=False, generator=None, pin_memory=False))
    assert [len(y) for _, y in evaluation] == [3, 3, 3, 1]
    assert torch.equal(torch.cat([x for x, _ in evaluation]), torch.stack([x for x, _ in tiny.train]))  # in order


class _KilledOnRead(torch.utils.data.Dataset):
    """A worker reading it is killed, as the kernel's OOM killer would kill it."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        os.kill(os.getpid(), signal.SIGKILL)
        return index


def test_a_dead_loader_worker_is_one_line_saying_what_to_do() -> None:
    loader = torch.utils.data.DataLoader(_KilledOnRead(), num_workers=1, multiprocessing_context="fork")
    with pytest.raises(UserError) as died, worker_deaths("run it again"):
        list(loader)
    message = str(died.value)
    assert message.startswith("a DataLoader worker process died (DataLoader worker (pid") and "\n" not in message
    assert message.endswith("lower data.num_workers if memory ran out; run it again"), message
    with pytest.raises(RuntimeError, match=r"^another error$"), worker_deaths("run it again"):
        raise RuntimeError("another error")


def test_a_worker_death_is_reported_where_a_batch_is_read(tiny: DataModule) -> None:
    """torch's SIGCHLD handler would raise a dead worker's error at any line of the main process (a context
    manager's exit, the summary's write), past every handler: make_loader keeps it from being installed (torch's
    private flag: when torch renames it, this fails). A read from a dying worker can break its pipe before the
    loader sees the death: that is reported as the death too, and the same error from elsewhere is not."""
    from torch.utils.data._utils import signal_handling

    assert hasattr(signal_handling, "_SIGCHLD_handler_set"), "torch renamed its SIGCHLD flag: update lab.data.loaders"
    before, signal_handling._SIGCHLD_handler_set = signal_handling._SIGCHLD_handler_set, False
    try:
        make_loader(tiny.train, data_cfg(batch_size=2, num_workers=1), train=True, generator=None, pin_memory=False)
        assert signal_handling._SIGCHLD_handler_set is True
    finally:
        signal_handling._SIGCHLD_handler_set = before
    scope = {"__name__": "torch.utils.data.dataloader"}  # a function of torch's loader, as far as the check sees
    exec(
        compile("def read():\n    raise ConnectionResetError(104, 'Connection reset by peer')\n", "dl.py", "exec"),
        scope,
    )
    broke = r"^a DataLoader worker process died \(the connection to it broke: .*Connection reset by peer\).*again$"
    with pytest.raises(UserError, match=broke), worker_deaths("again"):
        scope["read"]()
    with pytest.raises(ConnectionResetError), worker_deaths("again"):
        raise ConnectionResetError(104, "a tracker's server, not a worker")


def test_workers_start_the_platforms_way_even_in_a_spawned_process(tiny: DataModule) -> None:
    """A process started by spawn (dist=ddp's ranks) has "spawn" as its default: its workers must not inherit it."""

    def start_method(**overrides) -> str | None:
        cfg = data_cfg(batch_size=2, **overrides)
        context = make_loader(tiny.train, cfg, train=True, generator=None, pin_memory=False).multiprocessing_context
        return context.get_start_method() if context is not None else None

    platform_default = multiprocessing.get_all_start_methods()[0]
    multiprocessing.set_start_method("spawn" if platform_default != "spawn" else "forkserver", force=True)
    try:
        assert start_method(num_workers=1) == platform_default
        assert start_method(num_workers=1, multiprocessing_context="spawn") == "spawn"
        assert start_method() is None  # no workers
    finally:
        multiprocessing.set_start_method(None, force=True)
    with pytest.raises(ConfigError, match=r"data\.multiprocessing_context='threads' is not valid; choose one of"):
        data_cfg(multiprocessing_context="threads")


def test_make_loader_shuffle_is_reproducible(tiny: DataModule) -> None:
    cfg = data_cfg(batch_size=1)

    def order(seed: int) -> list[float]:
        loader = make_loader(
            tiny.train, cfg, train=True, generator=torch.Generator().manual_seed(seed), pin_memory=False
        )
        return [x.sum().item() for x, _ in loader]

    assert order(0) == order(0)
    assert order(0) != order(1)
    sampled = make_loader(
        tiny.train,
        cfg,
        train=True,
        generator=None,
        pin_memory=False,
        sampler=torch.utils.data.SequentialSampler(tiny.train),
    )
    assert [y.item() for _, y in sampled] == tiny.train.labels.tolist()


def test_make_loader_rejects_batch_larger_than_train_set(tiny: DataModule) -> None:
    with pytest.raises(ConfigError, match=r"data\.batch_size=64"):
        make_loader(tiny.train, data_cfg(), train=True, generator=None, pin_memory=False)
    assert len(make_loader(tiny.val, data_cfg(), train=False, generator=None, pin_memory=False)) == 1


class NumpyDraws(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, int]:
        return torch.utils.data.get_worker_info().id, int(np.random.randint(0, 2**31))


def test_seed_worker_seeds_numpy_per_worker() -> None:
    cfg = data_cfg(batch_size=1, num_workers=2, persistent_workers=False)

    def draws(seed: int) -> dict[int, list[int]]:
        loader = make_loader(
            NumpyDraws(), cfg, train=False, generator=torch.Generator().manual_seed(seed), pin_memory=False
        )
        out: dict[int, list[int]] = {0: [], 1: []}
        for worker, value in loader:
            out[int(worker)].append(int(value))
        return out

    first = draws(0)
    assert first[0][0] != first[1][0]  # forked workers must not share the parent's numpy state
    assert draws(0) == first and draws(1) != first


def test_seed_worker_derives_seeds_from_torch() -> None:
    # direct check: recent torch also reseeds numpy in workers, so the loader test alone cannot pin seed_worker
    torch.manual_seed(123)
    seed_worker(0)
    assert np.random.randint(0, 2**31) == np.random.RandomState(123).randint(0, 2**31)
    assert random.random() == random.Random(123).random()


class Augmented(torch.utils.data.Dataset):
    """Each item draws from the worker's torch RNG, as random augmentation does."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.rand(1), index


def _epoch_batches(loader, epoch: int) -> list[list[float]]:
    loader.sampler.set_epoch(epoch)
    return [x.flatten().tolist() for x, _ in loader]


def test_persistent_workers_augment_by_epoch_so_a_resumed_run_draws_the_same():
    # a loader that trained epoch 0 vs a fresh one (a resumed run) starting at epoch 1: persistent workers, seeded
    # once at start-up, would carry epoch 0's draws into epoch 1
    cfg = data_cfg(batch_size=4, num_workers=2, persistent_workers=True)

    def loader():
        dataset = Augmented()
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=1, rank=0, seed=5)  # as training uses
        generator = torch.Generator().manual_seed(5)
        return make_loader(dataset, cfg, train=True, generator=generator, pin_memory=False, sampler=sampler)

    straight = loader()
    epoch0 = _epoch_batches(straight, 0)
    epoch1 = _epoch_batches(straight, 1)
    assert _epoch_batches(loader(), 1) == epoch1
    assert epoch1 != epoch0 and len({tuple(b) for b in epoch0 + epoch1}) == 8  # fresh draws per epoch and worker


def test_evaluation_loaders_leave_the_global_rng_alone(tiny: DataModule):
    # every new iterator draws a base seed; from the global RNG it would shift dropout at every validation
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    for workers in (0, 2):
        list(make_loader(tiny.val, data_cfg(num_workers=workers), train=False, generator=None, pin_memory=False))
    assert torch.equal(torch.rand(3), expected)


def test_unreadable_training_images_are_skipped_up_to_the_limit_then_named(tmp_path: Path) -> None:
    from lab.data.folder import ImageFolderDataset
    from lab.errors import UserError

    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(good)
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not pixels")
    to_tensor = lambda img: torch.zeros(1)  # noqa: E731
    samples = [(str(bad), 0), (str(good), 1)]
    tolerant = ImageFolderDataset(samples, to_tensor, max_bad=1)
    assert tolerant[0][1] == 1 and tolerant.bad == 1  # the next image took its place
    with pytest.raises(UserError, match=r"cannot read image .*bad\.png: .*\(1 unreadable image\(s\) skipped before"):
        tolerant[0]  # the second bad read is over the limit
    with pytest.raises(UserError, match=r"set data\.max_bad_samples=N to skip up to N"):
        ImageFolderDataset(samples, to_tensor)[0]


def test_an_error_from_a_loader_worker_is_reported_as_its_own_line() -> None:
    from lab.cli import one_line
    from lab.errors import UserError

    wrapped = UserError(
        "Caught UserError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 3, in f\n    raise\n'
        f"{UserError.__module__}.UserError: cannot read image a.png: broken\n"
    )
    assert one_line(wrapped) == "cannot read image a.png: broken"
    assert one_line(UserError("plain")) == "plain"
