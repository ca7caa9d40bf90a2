"""Read a wandb offline run file (``run-<id>.wandb``) without a server, for tests.

The file is a LevelDB-style log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32 KiB blocks of
records, each `crc32 (uint32) | length (uint16) | type (uint8) | data`, where type FULL=1 holds a whole payload
and FIRST=2 / MIDDLE=3 / LAST=4 chain a payload across blocks. A block tail shorter than a record header is zero
padding. Every payload is one serialized protobuf `Record` from `wandb.proto.wandb_internal_pb2`.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

HEADER = struct.Struct("<4sHB")  # ident, magic, version
RECORD_HEADER = struct.Struct("<IHB")  # checksum, length, type
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class CorruptRunFile(ValueError):
    pass


def read_payloads(path: str | Path) -> list[bytes]:
    data = Path(path).read_bytes()
    ident, magic, version = HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1 or version != 0:
        raise CorruptRunFile(f"{path}: not a wandb run file (header {ident!r} {magic:#x} v{version})")
    payloads, pending, offset = [], None, HEADER.size
    while offset + RECORD_HEADER.size <= len(data):
        room = BLOCK - offset % BLOCK
        if room < RECORD_HEADER.size:  # zero trailer at the end of a block
            offset += room
            continue
        checksum, length, kind = RECORD_HEADER.unpack_from(data, offset)
        if checksum == length == kind == 0:  # preallocated / unwritten tail
            break
        start = offset + RECORD_HEADER.size
        chunk = data[start : start + length]
        if len(chunk) < length:
            raise CorruptRunFile(f"{path}: record at byte {offset} is truncated")
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            raise CorruptRunFile(f"{path}: checksum mismatch at byte {offset}")
        offset = start + length
        if kind == FULL:
            payloads.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind in (MIDDLE, LAST):
            if pending is None:
                raise CorruptRunFile(f"{path}: continuation record without a FIRST at byte {offset}")
            pending += chunk
            if kind == LAST:
                payloads.append(pending)
                pending = None
        else:
            raise CorruptRunFile(f"{path}: unknown record type {kind} at byte {offset}")
    return payloads


@dataclass
class OfflineRun:
    run_id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    git_commit: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    exit_code: int | None = None


def _items(items) -> dict[str, Any]:
    out = {}
    for item in items:
        key = item.key or ".".join(item.nested_key)  # nested_key ["_wandb", "runtime"]; metric names keep their "/"
        out[key] = json.loads(item.value_json)
    return out


def read_run(path: str | Path) -> OfflineRun:
    """Parse one `run-<id>.wandb` file into config, history rows, summary, git and file information."""
    run = OfflineRun()
    for payload in read_payloads(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.name, run.group, run.job_type = r.run_id, r.display_name, r.run_group, r.job_type
            run.tags, run.git_commit = list(r.tags), r.git.commit
            run.config.update(_items(r.config.update))
        elif kind == "config":
            run.config.update(_items(record.config.update))
        elif kind == "history":
            row = _items(record.history.item)
            if record.history.HasField("step"):
                row.setdefault("_step", record.history.step.num)
            run.history.append(row)
        elif kind == "summary":
            run.summary.update(_items(record.summary.update))
        elif kind == "files":
            run.files += [f.path for f in record.files.files]
        elif kind == "artifact":
            run.artifacts.append(record.artifact.name)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def find_run_files(root: str | Path) -> list[Path]:
    """Every offline run file under `root` (e.g. a run dir's wandb/ folder), oldest first."""
    return sorted(Path(root).rglob("run-*.wandb"))
