"""A test-only model option, model=token_bag, that takes data=hf's token batches until model=hf is merged in.

Each token's embedding goes through one linear layer: per token for task=language_model (a bigram model), averaged
over the attention mask for task=classification. Importing this module registers the option (a subprocess imports
it through run_script's patch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lab.config import ModelConfig, register


class TokenBagNet(nn.Module):
    def __init__(self, vocab: int, width: int, outputs: int, per_token: bool) -> None:
        super().__init__()
        self.embed, self.out, self.per_token = nn.Embedding(vocab, width), nn.Linear(width, outputs), per_token

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        h = self.embed(inputs["input_ids"])
        if self.per_token:
            return self.out(h)
        mask = inputs["attention_mask"].unsqueeze(-1).to(h.dtype)
        return self.out((h * mask).sum(1) / mask.sum(1))


@dataclass
class TokenBag(ModelConfig):
    width: int = 8

    def build(self, meta: dict[str, Any]) -> nn.Module:
        per_token = "num_classes" not in meta
        return TokenBagNet(int(meta["vocab_size"]), self.width, int(meta["num_outputs"]), per_token)


register()
