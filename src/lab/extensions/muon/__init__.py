"""The `muon` extension: `optimizer=muon` (torch.optim.Muon on the hidden weight matrices, AdamW on the rest) and
`scheduler=wsd` (warmup, stable, decay), the pair modern LM recipes train with (its page: README.md here).

`options.py` holds both options; `optimizer.py` the one optimizer object holding both algorithms, which the Trainer
steps, clips, scales and checkpoints like any other; `schedule.py` the WSD multiplier; `bench_optimizers.py` races
AdamW+cosine against Muon+WSD on the character GPT to a fixed validation loss.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ()  # torch only: torch.optim.Muon ships with it
