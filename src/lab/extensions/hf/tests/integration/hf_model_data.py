"""A test-only dataset option, `data=hf_model_text`: tiny.py's sentences, tokenized by a saved tokenizer.

It yields the batches the data side of the extension makes (classification: a dict of `input_ids` and
`attention_mask` with a class label; causal LM: token ids with the next tokens as labels, -100 on padding), so the
model side is tested through the real scripts. A test's process imports it first (run_script's `patch`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from lab.config import DataConfig, register

LENGTH = 12  # every sentence fits, padded to this many tokens


@dataclass
class HfModelTextConfig(DataConfig):
    tokenizer: str = MISSING  # a directory written by save_pretrained
    kind: str = "classification"  # or causal_lm
    num_samples: int = 96
    batch_size: int = 8

    def build(self) -> Any:
        import tiny
        import torch

        from lab.data.common import DataModule
        from lab.extensions.hf.hub import load_tokenizer

        tok = load_tokenizer(self.tokenizer)
        rows = tiny.sentences(self.num_samples)
        texts = [text + (" [EOS]" if self.kind == "causal_lm" else "") for text, _ in rows]
        encoded = tok(texts, padding="max_length", max_length=LENGTH + 1, return_tensors="pt")
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        meta: dict[str, Any] = {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id, "tokenizer": self.tokenizer}
        if self.kind == "classification":
            labels = torch.tensor([label for _, label in rows])
            samples = [({"input_ids": ids[i, :LENGTH], "attention_mask": mask[i, :LENGTH]}, labels[i]) for i in
                       range(len(rows))]  # fmt: skip
            meta |= {"input_shape": [LENGTH], "num_outputs": 2, "num_classes": 2, "class_names": ["neg", "pos"]}
        else:
            targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            samples = [(ids[i, :LENGTH], targets[i]) for i in range(len(rows))]
            meta |= {"input_shape": [LENGTH], "num_outputs": len(tok), "block_size": LENGTH}
        cut = len(samples) * 3 // 4
        return DataModule(samples[:cut], samples[cut:], samples[cut:], meta)


register()
