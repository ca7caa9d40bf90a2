"""The `muon` extension: `optimizer=muon` and `scheduler=wsd`, the pair modern LM recipes train with. See README.md.

`optimizer=muon` runs torch.optim.Muon on the hidden weight matrices and AdamW on the rest. `scheduler=wsd` is
warmup, stable, decay. `options.py` holds both options. `optimizer.py` holds both algorithms in one optimizer, which
the Trainer steps, clips, scales and checkpoints like any other. `schedule.py` is the WSD multiplier.
`bench_optimizers.py` races AdamW+cosine against Muon+WSD on the character GPT to a fixed validation loss.
"""

from __future__ import annotations

EXTRAS: tuple[str, ...] = ()  # torch.optim.Muon ships with torch
