"""Training-only augmentation from torchvision's v2 transforms.

image_folder's per-image pipeline can add an automatic policy (RandAugment, TrivialAugmentWide) and random erasing.
MixUp/CutMix act on whole training batches. Where each runs, and why:

- `data.auto_augment` acts on the PIL image after the random resized crop and flip, since the policies' ops are
  defined on 8-bit images. `data.random_erasing` acts on the normalized tensor, so an erased patch is 0, the
  dataset's mean colour. Both run per image in `PolicyImageTransform`, in the loader's workers.
- `data.mixup_alpha` / `data.cutmix_alpha` mix each training batch with itself rolled by one sample, in `MixBatch`
  (the training loader's `collate_fn`). The batch leaves the loader as (mixed images, soft targets (N, K)), so the
  trainer and the task's `weight` and `loss` see the targets they train on. Validation, test and eval loaders
  leave `collate_fn` unset and never mix.

Every random draw comes from the global torch RNG of the process that runs it. A worker reseeds it for each batch
from the loader seed, epoch and batch position (`loaders.EpochSeededDataset`), and the collate runs in that same
worker. Without workers it is the main process's RNG, which checkpoints save. Either way a resumed run draws what
an uninterrupted one drew. These are classes, not closures, so workers can pickle them under spawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image
from torch.utils.data import default_collate

from lab.data.transforms import TrainImageTransform, to_mode

if TYPE_CHECKING:
    from lab.data.options import ImageFolderConfig

AUTO_AUGMENT = ("randaugment", "trivialaugment")  # data.auto_augment's values (null means none)


def policy(name: str | None) -> Any:
    """Return the v2 transform `data.auto_augment` names, at torchvision's default magnitudes, or None."""
    if name is None:
        return None
    from torchvision.transforms import v2  # imported lazily: torchvision is slow to import

    if name == "randaugment":
        return v2.RandAugment()  # 2 ops per image, magnitude 9 of 31: the paper's ImageNet setting
    if name == "trivialaugment":
        return v2.TrivialAugmentWide()
    raise ValueError(f"data.auto_augment must be one of {', '.join(AUTO_AUGMENT)} or null, got {name!r}")


class PolicyImageTransform:
    """Crop and flip (`TrainImageTransform`), then an augmentation policy on the PIL image and random erasing on
    the normalized tensor."""

    def __init__(self, base: TrainImageTransform, auto_augment: str | None, erasing: float) -> None:
        from torchvision.transforms import v2

        self.base = base
        self.policy = policy(auto_augment)
        self.erase = v2.RandomErasing(p=erasing, value=0.0) if erasing > 0 else None

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = self.base.augment(to_mode(img, self.base.mode))
        if self.policy is not None:
            img = self.policy(img)
        x = self.base.to_tensor(img)
        return self.erase(x) if self.erase is not None else x


def train_transform(
    cfg: ImageFolderConfig,
    in_channels: int,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    interpolation: str = "bilinear",
) -> TrainImageTransform | PolicyImageTransform:
    """Build image_folder's training transform (data.augment=true): crop and flip, plus data.auto_augment and
    data.random_erasing."""
    base = TrainImageTransform(in_channels, image_size, mean, std, interpolation)
    auto_augment, erasing = cfg.auto_augment, float(cfg.random_erasing)
    if auto_augment is None and erasing == 0:
        return base
    return PolicyImageTransform(base, auto_augment, erasing)


class MixBatch:
    """Collate a training batch with torch's default, then apply MixUp or CutMix.
    When both alphas are > 0, each batch picks one of the two with equal odds. Returns (images, soft targets (N, K)
    float32). Each row sums to 1, and its argmax is the label of the image that keeps the larger share."""

    def __init__(self, num_classes: int, mixup_alpha: float, cutmix_alpha: float) -> None:
        from torchvision.transforms import v2

        mixers = [v2.MixUp(alpha=mixup_alpha, num_classes=num_classes)] if mixup_alpha > 0 else []
        mixers += [v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)] if cutmix_alpha > 0 else []
        if not mixers:
            raise ValueError("MixBatch needs mixup_alpha > 0 or cutmix_alpha > 0")
        self.mix = mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)

    def __call__(self, samples: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = default_collate(samples)
        return self.mix(images, labels)
