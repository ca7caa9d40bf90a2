"""Language modelling: next-token cross-entropy weighted by tokens, perplexity and token accuracy.
Padding (target -100) carries no weight. Eval writes sample generations, and infer continues a prompt."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lab.data.text import IGNORE_INDEX, TextCodec, meta_codec
from lab.errors import UserError
from lab.tasks.base import BaseTask, EvalContext, InferContext, Predictions

EVAL_PROMPTS = ("def ", "import ", "\n", "The ", " ")  # eval uses the first `samples` the vocabulary can spell


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Return the next-token cross-entropy summed over tokens whose target is not IGNORE_INDEX, in fp32.
    It is the one definition of the loss, for training and metrics; fp32 keeps the softmax exact under autocast."""
    flat = logits.float().reshape(-1, logits.shape[-1])
    return F.cross_entropy(flat, targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")


class TokenMetrics:
    """Accumulate the token loss, correct next-token guesses and token count (float64, on the device)."""

    def __init__(self, device: torch.device) -> None:
        self.totals = torch.zeros(3, dtype=torch.float64, device=device)

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        flat, labels = logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1)
        counted = labels != IGNORE_INDEX
        loss = token_cross_entropy(logits, targets)
        correct = ((flat.argmax(-1) == labels) & counted).sum()
        self.totals += torch.stack([loss.double(), correct.double(), counted.sum().double()])

    def compute(self) -> dict[str, float]:
        loss, correct, count = self.totals.tolist()
        if count == 0:
            return {}
        return {"loss": loss / count, "perplexity": math.exp(min(loss / count, 700)), "token_acc": correct / count}


class LanguageModel(BaseTask[TokenMetrics]):
    name = "language_model"
    monitor = "loss"
    mode = "min"
    normaliser = "tokens"  # not sequences, so padding (target IGNORE_INDEX) weighs nothing
    ignore_index = IGNORE_INDEX
    dynamic_dims = (0, 1)  # batch and sequence

    def __init__(self, meta: dict[str, Any], samples: int = 3, sample_tokens: int = 120) -> None:
        self.meta, self.samples, self.sample_tokens = meta, samples, sample_tokens
        self.vocab_size, self.block_size = int(meta["vocab_size"]), int(meta["block_size"])

    def check_first_batch(self, inputs: Any, targets: Any) -> str:
        if isinstance(inputs, Mapping):  # a tokenizer's batch: the ids beside their attention mask
            inputs = inputs.get("input_ids")
        for name, ids in (("inputs", inputs), ("targets", targets)):
            if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.ndim != 2:
                raise UserError(f"task=language_model needs int64 token {name} of shape (batch, sequence)")
        real = targets[targets != IGNORE_INDEX]
        if len(real) and (
            int(real.min()) < 0 or int(real.max()) >= self.vocab_size or int(inputs.max()) >= self.vocab_size
        ):
            raise UserError(
                f"token ids fall outside the vocabulary of {self.vocab_size}; check the tokenizer and data_meta"
            )
        return f"{int((targets != IGNORE_INDEX).sum())} target tokens of a {self.vocab_size}-symbol vocabulary"

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return token_cross_entropy(logits, targets)

    def metrics(self, device: torch.device, full: bool = False) -> TokenMetrics:
        return TokenMetrics(device)

    def write_eval_artifacts(self, metrics: TokenMetrics, context: EvalContext) -> tuple[dict[str, Any], list[Path]]:
        codec = context.codec or meta_codec(self.meta)
        if codec is None:  # the data gives no way to spell text: no samples
            return {}, []
        prompts = [p for p in EVAL_PROMPTS if codec.spells(p)][: self.samples]
        model, generator = context.model, torch.Generator().manual_seed(0)

        @torch.inference_mode()
        def logits(ids: torch.Tensor) -> torch.Tensor:
            return model(ids.to(context.device)).float().cpu()

        samples = [
            {"prompt": p, "text": self.continue_text(logits, codec, p, self.sample_tokens, 0.8, 20, generator)}
            for p in prompts
        ]
        path = context.run_dir / "samples.txt"
        path.write_text("".join(f"--- prompt {s['prompt']!r}\n{s['prompt']}{s['text']}\n\n" for s in samples))
        return {"samples": samples}, [path]

    def agreement(self, reference: torch.Tensor, outputs: torch.Tensor) -> float | None:
        return float((reference.argmax(-1) == outputs.argmax(-1)).float().mean())

    def predict(self, backend: Any, context: InferContext) -> Predictions:
        """Continue prompt= by infer.max_new_tokens tokens, sampled reproducibly from infer.seed."""
        cfg = context.cfg
        if cfg.prompt is None:
            raise UserError("prompt= is required for a language model: the text to continue, e.g. prompt='def '")
        codec = context.codec or meta_codec(self.meta)
        if codec is None:
            raise UserError("this checkpoint's data_meta gives no way to encode prompt= (no vocabulary or tokenizer)")
        generator = torch.Generator().manual_seed(int(cfg.infer.seed))
        options = cfg.infer
        text = self.continue_text(
            backend, codec, cfg.prompt, options.max_new_tokens, options.temperature, options.top_k, generator
        )
        return Predictions([{"prompt": cfg.prompt, "text": text, "tokens": options.max_new_tokens}], [])

    def continue_text(
        self,
        logits: Callable[[torch.Tensor], torch.Tensor],
        codec: TextCodec,
        prompt: str,
        max_new_tokens: int,
        temperature: float,
        top_k: int,
        generator: torch.Generator,
    ) -> str:
        """Sample a continuation token by token, cropping the context to the model's block_size."""
        ids = codec.encode(prompt)
        if not ids:
            raise UserError("prompt='' is empty: give at least one character to continue")
        new: list[int] = []
        for _ in range(max_new_tokens):
            context = torch.tensor([(ids + new)[-self.block_size :]], dtype=torch.long)
            last = logits(context)[0, -1] / temperature
            if top_k < last.numel():
                last[last < last.topk(top_k).values[-1]] = -math.inf
            new.append(int(torch.multinomial(last.softmax(-1), 1, generator=generator)))
        return codec.decode(new)
