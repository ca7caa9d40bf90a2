"""The `big_data` extension: data larger than memory, prepared once into files that training reads by index, never
whole (its page: README.md here).

`data=shards` (shards.py: an image folder, or a fork's tensors, as WebDataset tar shards, memory-mapped, on disk or a
server), `data=tokens` (tokens.py: a corpus as byte-level BPE token files, memory-mapped windows; the preset
`experiment=bpe_lm` trains a GPT on them) and `data=hf` (hf.py: Arrow tables through Hugging Face `datasets`).
`python scripts/prepare_data.py data=<option> ...` writes them through each option's `prepare()` (the core's seam,
DataConfig.prepare/verify); prepared.py is what every prepared folder shares: parts written under temp names and
recorded with their checksums, a resumable prepare, the manifest that training checks (partial, stale, damaged).
"""

EXTRAS: tuple[str, ...] = ("data",)  # webdataset, wids, tokenizers, datasets, pyarrow
