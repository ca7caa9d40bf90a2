"""data=tokens (tokens.py): a BPE tokenizer and token files prepared from a small corpus written into tmp_path,
read back as memory-mapped windows; the refusals of a partial, stale or damaged folder; a resumed prepare."""

from __future__ import annotations

import io
import json
import pickle
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from lab.config import ConfigError
from lab.data.text import decode, encode, tokenizer_of
from lab.errors import UserError
from lab.extensions.big_data import tokens
from lab.extensions.big_data.options import TokensConfig

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# the unicode line: multi-byte characters the byte-level BPE must split into bytes and join again
EXTRA = "naïve café — 世界 🎉\n\tindented after a tab\n  \ntrailing spaces   \nend"


def write_corpus(folder: Path, chars: int) -> Path:
    """Two documents of real text (Python sources, indentation and blank lines) and a file that is not *.txt."""
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text((STDLIB / "textwrap.py").read_text()[:chars] + EXTRA)
    (folder / "b.txt").write_text((STDLIB / "difflib.py").read_text()[:chars])
    (folder / "notes.md").write_text("not read: only *.txt files are")
    return folder


def config(source: Path, path: Path, **keys) -> TokensConfig:
    # shards of 20 KB of text: a corpus of a few tens of KB makes several files, windows spanning two of them
    return TokensConfig(
        source=str(source), path=str(path), **{"vocab_size": 400, "shard_mb": 0.02, "block_size": 32, **keys}
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "text", 40_000)


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> TokensConfig:
    cfg = config(corpus, tmp_path_factory.mktemp("prepared") / "tokens")
    cfg.prepare()
    return cfg


def expected_ids(corpus: Path, meta: dict) -> list[int]:
    """Each document encoded whole, in sorted order: what the pieces-and-shards stream must equal."""
    return [i for name in ("a.txt", "b.txt") for i in encode((corpus / name).read_text(), meta)]


def test_windows_are_the_tokenizers_encoding_of_the_corpus(prepared, corpus):
    module = prepared.build()
    meta, folder = module.meta, Path(prepared.path)
    manifest = json.loads((folder / "manifest.json").read_text())
    info = manifest["info"]
    assert meta["level"] == "bpe" and meta["vocab_size"] == info["vocab_size"] <= 400
    assert info["dtype"] == "uint16" and len(info["files"]) >= 3  # several token files
    assert (folder / tokens.TOKENIZER).read_text() and tokenizer_of(meta["tokenizer"]).get_vocab_size() == 400
    ids = expected_ids(corpus, meta)
    stream = np.concatenate([np.fromfile(folder / name, dtype=np.uint16) for name in info["files"]])
    assert stream.tolist() == ids and info["tokens"] == len(ids)
    block, offset = prepared.block_size, 0
    for split in (module.train, module.val, module.test):
        for index in range(len(split)):
            x, y = split[index]
            start = offset + index * block
            assert x.dtype == torch.int64 and x.tolist() == ids[start : start + block]
            assert y.tolist() == ids[start + 1 : start + block + 1]
        offset = split.stop
        if len(split):  # a batch's items, read together: the same windows (some spanning two files)
            indices = list(range(len(split)))[::-1]
            assert all(
                torch.equal(a, b)
                for item, index in zip(split.__getitems__(indices), indices)
                for a, b in zip(item, split[index])
            )
    n_test, n_val = int(len(ids) * prepared.test_fraction), int(len(ids) * prepared.val_fraction)
    assert (module.val.start, module.test.start) == (len(ids) - n_val - n_test, len(ids) - n_test)


def test_items_are_read_from_the_files_memory_mapped_and_workers_get_paths_only(prepared):
    train = prepared.build().train
    assert train._maps is None  # nothing opened until an item is read
    first = train[0]
    assert all(isinstance(m, np.memmap) for m in train._maps)
    sent = pickle.dumps(train)  # what a spawned DataLoader worker receives
    assert len(sent) < 2_000 < sum(Path(f).stat().st_size for f in train.files)
    copy = pickle.loads(sent)
    assert copy._maps is None and all(torch.equal(a, b) for a, b in zip(copy[0], first, strict=True))


def test_an_interrupted_prepare_resumes_to_the_same_checksums(prepared, corpus, tmp_path, monkeypatch):
    cfg = config(corpus, tmp_path / "tokens")
    real_write, calls, stopped = tokens.write_shard, [], []

    def second_fails(path, pieces, **kw):
        calls.append(path)
        if len(calls) == 2 and not stopped:
            stopped.append(path)
            raise KeyboardInterrupt  # the prepare is stopped while it writes the second token file
        return real_write(path, pieces, **kw)

    monkeypatch.setattr(tokens, "write_shard", second_fails)
    with pytest.raises(KeyboardInterrupt):
        cfg.prepare()
    with pytest.raises(ConfigError, match="partial prepare") as err:
        cfg.build()
    assert "\n" not in str(err.value) and "python scripts/prepare_data.py data=tokens" in str(err.value)
    monkeypatch.setattr(tokens, "train_tokenizer", lambda *a: pytest.fail("the resumed prepare trained again"))
    calls.clear()
    cfg.prepare()
    assert len(calls) == len(json.loads((Path(prepared.path) / "manifest.json").read_text())["info"]["files"]) - 1
    resumed, straight = (json.loads((Path(c.path) / "manifest.json").read_text()) for c in (cfg, prepared))
    assert resumed["parts"] == straight["parts"] and resumed["info"] == straight["info"]


def one_line_refusal(cfg: TokensConfig, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        cfg.build()
    assert "\n" not in str(err.value)


def test_a_missing_partial_stale_damaged_or_mismatched_folder_is_refused_in_one_line(tmp_path):
    source = write_corpus(tmp_path / "text", 4_000)
    cfg = config(source, tmp_path / "tokens", vocab_size=300, shard_mb=0.002, block_size=8)
    one_line_refusal(cfg, "does not exist; prepare it with: python scripts/prepare_data.py data=tokens")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty/x.txt").write_text("")
    for bad, match in ((tmp_path / "none", "does not exist; give a text file"), (tmp_path / "empty", "holds no text")):
        with pytest.raises(ConfigError, match=match):
            config(bad, tmp_path / "tokens").prepare()
        assert not (tmp_path / "tokens").exists()  # refused before the first write
    cfg.prepare()
    folder = Path(cfg.path)
    one_line_refusal(config(tmp_path / "other", folder, vocab_size=300, shard_mb=0.002), "was prepared from")
    one_line_refusal(config(source, folder, vocab_size=512, shard_mb=0.002), r"data\.vocab_size=300, not 512")
    with pytest.raises(UserError, match="does not match its checksum"):  # same size, one byte changed
        data = bytearray((folder / "tokens-00001.bin").read_bytes())
        data[0] ^= 1
        (folder / "tokens-00001.bin").write_bytes(bytes(data))
        cfg.verify()
    (folder / "manifest.json").rename(tmp_path / "manifest.json")
    one_line_refusal(cfg, "has no manifest.json")
    (tmp_path / "manifest.json").rename(folder / "manifest.json")
    with open(source / "b.txt", "a") as f:
        f.write("more text\n")
    one_line_refusal(cfg, "is stale")
    with open(folder / "tokens-00001.bin", "r+b") as f:
        f.truncate(10)
    one_line_refusal(cfg, r"is damaged: tokens-00001\.bin has 10 bytes")


def test_ids_round_trip_through_the_meta_and_the_dtype_follows_the_vocabulary(prepared):
    meta = prepared.build().meta
    saved = io.BytesIO()
    torch.save({"data_meta": meta}, saved)  # plain types: a checkpoint's data_meta is read with weights_only=True
    assert torch.load(io.BytesIO(saved.getvalue()), weights_only=True)["data_meta"] == meta
    text = "def f(x):\n    return 'naïve 世界 🎉'\n"
    ids = encode(text, meta)
    assert all(0 <= i < meta["vocab_size"] for i in ids) and decode(ids, meta) == text
    assert tokens.token_dtype(65_536) == np.uint16 and tokens.token_dtype(65_537) == np.uint32
    with pytest.raises(ConfigError, match=r"set data\.loader=torch"):
        TokensConfig(path="x", loader="device")


def test_pieces_are_cut_where_the_encoding_does_not_change(prepared, corpus):
    tokenizer = tokenizer_of(prepared.build().meta["tokenizer"])
    text = (corpus / "a.txt").read_text()
    pieces = list(tokens.read_pieces([corpus / "a.txt"], size=500))
    assert len(pieces) > 20 and "".join(pieces) == text
    joined = [i for e in tokenizer.encode_batch(pieces, add_special_tokens=False) for i in e.ids]
    assert joined == tokenizer.encode(text, add_special_tokens=False).ids


def test_bytes_that_are_not_utf8_are_counted_per_file_when_reported(tmp_path, caplog):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("déjà vu ".encode("latin-1") * 300)  # 600 bytes that are not UTF-8, over several blocks
    pieces = list(tokens.read_pieces([latin], size=100))
    assert "".join(pieces) == "d\ufffdj\ufffd vu " * 300 and not caplog.records  # the tokenizer's pass: silent
    list(tokens.read_pieces([latin], size=100, report=True))
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning == f"{latin}: 600 bytes are not valid utf-8 and were read as U+FFFD; save the file as UTF-8"
