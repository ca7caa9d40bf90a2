"""The `big_data` extension: data larger than memory, prepared once into files that training reads by index.

- `data=shards` (shards.py): an image folder or a fork's tensors as WebDataset tar shards, on disk or a server.
- `data=tokens` (tokens.py): a corpus as byte-level BPE token files. `experiment=bpe_lm` trains a GPT on them.

`python scripts/prepare_data.py data=<option> ...` calls each option's `prepare()`. prepared.py holds what every
prepared folder shares: checksummed parts, resumable prepares, and the manifest training checks. See README.md.
"""

EXTRAS: tuple[str, ...] = ("data",)  # webdataset, wids, tokenizers
