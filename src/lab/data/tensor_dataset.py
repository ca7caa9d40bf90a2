"""In-memory image dataset with batched fetching (digits, MNIST, CIFAR-10, synthetic)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.utils.data import Dataset

from lab.data.transforms import normalize


class TensorImageDataset(Dataset):
    """Images held as one (N,C,H,W) tensor; items are ``(normalized float32 x, int y)``.

    Images stay in their compact source dtype (uint8 for MNIST/CIFAR: 4x less memory than float) and are
    scaled by ``1/scale`` to [0,1], augmented, then normalized when fetched. ``__getitems__`` does this for
    a whole batch in a few tensor ops, which the DataLoader uses instead of one ``__getitem__`` per sample.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        scale: float,
        mean: Sequence[float],
        std: Sequence[float],
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
        source_indices: torch.Tensor | None = None,
    ) -> None:
        if images.ndim != 4 or len(images) != len(labels):
            raise ValueError(f"expected images (N,C,H,W) and N labels, got {tuple(images.shape)} and {len(labels)}")
        self.images = images
        self.labels = labels.long()
        self.scale = float(scale)
        self.mean = torch.tensor(list(mean), dtype=torch.float32)
        self.std = torch.tensor(list(std), dtype=torch.float32)
        self.augment = augment
        # row of each item in the source data (e.g. load_digits order): lets tests and audits check splits
        self.source_indices = torch.arange(len(labels)) if source_indices is None else source_indices

    def __len__(self) -> int:
        return len(self.labels)

    def _batch(self, index: torch.Tensor) -> torch.Tensor:
        x = self.images[index].float()
        if self.scale != 1.0:
            x = x / self.scale
        if self.augment is not None:
            x = self.augment(x)
        return normalize(x, self.mean, self.std)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = self._batch(torch.tensor([index]))
        return x[0], int(self.labels[index])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, int]]:
        index = torch.as_tensor(indices, dtype=torch.long)
        xs = self._batch(index)
        return list(zip(xs.unbind(0), self.labels[index].tolist()))

    def subset(
        self,
        index: torch.Tensor,
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> TensorImageDataset:
        """A new dataset holding rows ``index`` (copied, so the parent can be freed) with its own augment."""
        return TensorImageDataset(
            self.images[index],
            self.labels[index],
            scale=self.scale,
            mean=self.mean.tolist(),
            std=self.std.tolist(),
            augment=augment,
            source_indices=self.source_indices[index],
        )
