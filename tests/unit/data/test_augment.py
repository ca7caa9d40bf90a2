"""Training augmentation (lab.data.augment): the image_folder policies and random erasing, MixUp/CutMix on training
batches only, and the combinations refused before any work."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from PIL import Image

from lab.config import ConfigError, DataConfig, options, validate
from lab.data.augment import MixBatch, PolicyImageTransform, train_transform
from lab.data.datasets import build
from lab.data.loaders import make_loader
from lab.data.transforms import TrainImageTransform


def data_cfg(name: str = "digits", **overrides):
    return OmegaConf.structured(options.option_class("data", name)(**overrides))


def image(seed: int = 0, mode: str = "RGB") -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def draw(transform, img: Image.Image, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return transform(img)


@pytest.mark.parametrize("policy", ["randaugment", "trivialaugment"])
@pytest.mark.parametrize("channels", [1, 3])
def test_a_policy_gives_the_models_tensor_and_is_fixed_by_the_seed(policy: str, channels: int) -> None:
    cfg = data_cfg("image_folder", root="x", auto_augment=policy, in_channels=channels)
    transform = train_transform(cfg, channels, 8, [0.5] * channels, [0.5] * channels)
    assert isinstance(transform, PolicyImageTransform)
    img = image(mode="L" if channels == 1 else "RGB")
    x = draw(transform, img, 0)
    assert x.shape == (channels, 8, 8) and x.dtype == torch.float32
    assert torch.equal(x, draw(transform, img, 0))
    assert any(not torch.equal(x, draw(transform, img, seed)) for seed in range(1, 6))
    # the policy changes the images the crop and flip alone give under the same seed
    base = TrainImageTransform(channels, 8, [0.5] * channels, [0.5] * channels)
    assert any(not torch.equal(draw(base, img, s), draw(transform, img, s)) for s in range(6))


def test_without_the_new_keys_the_training_transform_is_the_crop_and_flip() -> None:
    assert type(train_transform(data_cfg("image_folder", root="x"), 3, 8, [0.5] * 3, [0.5] * 3)) is TrainImageTransform


def test_random_erasing_zeroes_a_rectangle_of_the_normalized_image_and_keeps_the_rest() -> None:
    base = TrainImageTransform(3, 16, [0.5] * 3, [0.5] * 3)
    erasing = PolicyImageTransform(base, None, 1.0)  # p = 1: every image
    img = image()
    for seed in range(4):
        plain, erased = draw(base, img, seed), draw(erasing, img, seed)  # the crop draws first: the same crop
        changed = erased != plain
        assert changed.any() and (erased[changed] == 0).all()  # 0 = the mean colour once normalized
        rows, cols = changed.any(0).nonzero(as_tuple=True)
        box = changed[:, rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert box.float().mean() > 0.9  # one rectangle (a pixel already 0 is "unchanged")


def write_folder(root: Path, per_class: int = 3) -> Path:
    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", 2)):
        for cls in ("cat", "dog"):
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(root / split / cls / f"{i}.png")
    return root


def test_image_folder_trains_with_the_policy_and_validates_without_it(tmp_path: Path) -> None:
    cfg = data_cfg("image_folder", root=str(write_folder(tmp_path)), image_size=8, auto_augment="trivialaugment")
    dm = build(cfg)
    assert isinstance(dm.train.transform, PolicyImageTransform)
    assert not isinstance(dm.val.transform, PolicyImageTransform) and dm.train_collate is None


# --------------------------------------------------------------------------- MixUp / CutMix
def samples(n: int = 8, classes: int = 4) -> list[tuple[torch.Tensor, int]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.rand(3, 6, 6, generator=gen), i % classes) for i in range(n)]


@pytest.mark.parametrize(("mixup", "cutmix"), [(0.2, 0.0), (0.0, 1.0), (0.2, 1.0)])
def test_mixing_gives_class_probabilities_fixed_by_the_seed(mixup: float, cutmix: float) -> None:
    mix, batch = MixBatch(4, mixup, cutmix), samples()
    torch.manual_seed(0)
    x, y = mix(batch)
    images, labels = torch.stack([s[0] for s in batch]), torch.tensor([s[1] for s in batch])
    assert x.shape == images.shape and x.dtype == torch.float32
    assert y.shape == (8, 4) and y.dtype == torch.float32 and (y >= 0).all()
    assert torch.allclose(y.sum(1), torch.ones(8))
    # each sample is mixed with the one before it (the batch rolled by one): its share of its own label is the rest
    share = y.gather(1, labels.view(-1, 1)).squeeze(1)
    assert torch.allclose(share + y.gather(1, labels.roll(1).view(-1, 1)).squeeze(1), torch.ones(8))
    assert not torch.equal(x, images)
    torch.manual_seed(0)
    again = mix(batch)
    assert torch.equal(again[0], x) and torch.equal(again[1], y)


def test_only_the_training_loader_mixes(tmp_path: Path) -> None:
    dm = build(data_cfg("synthetic", in_channels=1, image_size=4, num_samples=16, num_classes=3, cutmix_alpha=1.0))
    assert isinstance(dm.train_collate, MixBatch)
    cfg = OmegaConf.structured(DataConfig(batch_size=4))
    gen = torch.Generator().manual_seed(0)
    train = make_loader(dm.train, cfg, train=True, generator=gen, pin_memory=False, collate=dm.train_collate)
    _, targets = next(iter(train))
    assert targets.shape == (4, 3) and targets.is_floating_point()
    val = make_loader(dm.val, cfg, train=False, generator=None, pin_memory=False, collate=dm.train_collate)
    assert next(iter(val))[1].dtype == torch.int64
    assert build(data_cfg("synthetic", num_samples=16)).train_collate is None


# --------------------------------------------------------------------------- refused before any work
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.mixup_alpha=0.2", "data.loader=device"], "data.loader=device does not use; set data.loader=torch"),
        (["data.cutmix_alpha=-1"], "data.cutmix_alpha must be in [0, inf)"),
        (["data.mixup_alpha=0.2", "task=regression"], "only a classification task trains on (task=regression)"),
        (["data=image_folder", "data.root=x", "data.auto_augment=autoaugment"], "choose null, randaugment or"),
        (["data=image_folder", "data.root=x", "data.random_erasing=1.5"], "data.random_erasing must be in [0, 1]"),
        (
            ["data=image_folder", "data.root=x", "data.augment=false", "data.auto_augment=randaugment"],
            "which data.augment=false turns off; set data.augment=true",
        ),
    ],
)
def test_a_combination_that_cannot_work_is_one_config_error(compose, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(overrides))


def test_the_image_file_policies_are_keys_of_image_folder_only(compose) -> None:
    with pytest.raises(ConfigCompositionException, match=re.escape("auto_augment")):
        compose(["data=cifar10", "data.auto_augment=randaugment"])
