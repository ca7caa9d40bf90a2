"""Training-only augmentation from torchvision's v2 transforms (docs/architecture.md, "Training augmentation").

`data.auto_augment` acts on the PIL image after the crop and flip, since the policies' ops are defined on 8-bit
images; `data.random_erasing` on the normalized tensor, so an erased patch is 0, the dataset's mean colour.
`MixBatch` is the training loader's `collate_fn`, so validation never mixes. Every draw comes from the global torch
RNG of the process that runs it, which `loaders.EpochSeededDataset` reseeds per batch in a worker and checkpoints
save without workers, so a resumed run draws what an uninterrupted one drew. Classes, not closures, so workers
can pickle them under spawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image
from torch.utils.data import default_collate

from lab.data.transforms import TrainImageTransform, to_mode


class PolicyImageTransform:
    """Crop and flip (`TrainImageTransform`), then an augmentation policy (data.auto_augment, at torchvision's
    default magnitudes) on the PIL image and random erasing on the normalized tensor."""

    def __init__(self, base: TrainImageTransform, auto_augment: str | None, erasing: float) -> None:
        from torchvision.transforms import v2  # imported lazily: torchvision is slow to import

        self.base = base
        # RandAugment: 2 ops per image, magnitude 9 of 31, the paper's ImageNet setting
        policies = {"randaugment": v2.RandAugment, "trivialaugment": v2.TrivialAugmentWide}
        self.policy = None if auto_augment is None else policies[auto_augment]()
        self.erase = v2.RandomErasing(p=erasing, value=0.0) if erasing > 0 else None

    def __call__(self, img: Image.Image) -> torch.Tensor:
        img = self.base.augment(to_mode(img, self.base.mode))
        if self.policy is not None:
            img = self.policy(img)
        x = self.base.to_tensor(img)
        return self.erase(x) if self.erase is not None else x


def train_transform(
    cfg: Any,  # image_folder's option, not named: lab.data.options imports this module
    in_channels: int,
    image_size: int,
    mean: Sequence[float],
    std: Sequence[float],
    interpolation: str = "bilinear",
) -> TrainImageTransform | PolicyImageTransform:
    """Build image_folder's training transform (data.augment=true): crop and flip, plus data.auto_augment and
    data.random_erasing."""
    base = TrainImageTransform(in_channels, image_size, mean, std, interpolation)
    if cfg.auto_augment is None and cfg.random_erasing == 0:
        return base
    return PolicyImageTransform(base, cfg.auto_augment, float(cfg.random_erasing))


class MixBatch:
    """Collate a training batch with torch's default, then apply MixUp or CutMix (`data.build` sets it when the option's
    `batch_mixing()` asks). When both alphas are > 0, each batch picks one of the two with equal odds. Returns
    (images, soft targets (N, K) float32): each row sums to 1, its argmax the label of the image keeping the larger
    share, so the trainer and the task's `weight` and `loss` see the targets they train on."""

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
