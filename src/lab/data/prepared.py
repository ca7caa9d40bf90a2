"""Prepared data: a folder that ``scripts/prepare_data.py`` writes once, and its manifest (docs/architecture.md,
"Prepared data folder").

It is the core's because two extensions write such folders (big_data's shards and tokens, hf's Arrow tables), and
extensions never import each other. No torch: options import it. Nothing here deletes or overwrites what it did not
write. Part sizes are checked at every start; checksums only with ``scripts/prepare_data.py ... --verify``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab import files
from lab.errors import ConfigError, UserError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
PROGRESS = "parts.jsonl"
FORMAT_VERSION = 1
_CHUNK = 1 << 20


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(source: str | Path) -> str:
    """Hash each source file's relative path, size and mtime (a stat, no read), so it changes with the source."""
    root = Path(source).expanduser()
    digest = hashlib.sha256()
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for path in paths:
        stat = path.stat()
        digest.update(
            f"{path.relative_to(root) if path != root else path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
        )
    return digest.hexdigest()[:16]


def source_label(source: str | Path) -> str:
    """Name a source for the manifest: an existing path made absolute so it matches from any directory, else as is."""
    path = Path(source).expanduser()
    return str(path.resolve()) if path.exists() else str(source)


class Preparer:
    """Write one prepared folder: ``add`` each part, then ``finish``.

    ``add`` skips a part that an interrupted run of the same prepare finished. `command` is the command line of
    this prepare, for messages."""

    def __init__(
        self, out: str | Path, kind: str, params: dict[str, Any], source: str | Path | None, command: str
    ) -> None:
        self.out, self.kind, self.command = Path(out).expanduser(), kind, command
        self.header = {
            "kind": kind,
            "format_version": FORMAT_VERSION,
            "params": params,
            "source": None if source is None else source_label(source),
            "source_fingerprint": None if source is None else fingerprint(source),
        }
        self.parts: dict[str, dict[str, Any]] = {}
        self.up_to_date = False
        self._check_out()

    def _check_out(self) -> None:
        """Refuse, before writing anything, a folder this prepare would mix with or overwrite."""
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"data.path={self.out} is a file; give a folder for the prepared data")
        manifest = self.out / MANIFEST
        if manifest.is_file():
            old = json.loads(manifest.read_text())
            if {k: old.get(k) for k in self.header} == self.header:
                self.up_to_date = True
                return
            raise ConfigError(
                f"data.path={self.out} already holds data prepared from {old.get('source')} with other settings; "
                "choose another data.path (prepared data is never overwritten), or delete that folder yourself"
            )
        progress = self.out / PROGRESS
        if progress.is_file():
            lines = progress.read_text().splitlines()
            if not lines or json.loads(lines[0]) != self.header:
                raise ConfigError(
                    f"data.path={self.out} holds an unfinished prepare of other settings or another source; finish it "
                    "with its own command, or choose another data.path"
                )
            for line in lines[1:]:
                try:
                    part = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill: write that part again
                    continue
                if (self.out / part["name"]).is_file() and (self.out / part["name"]).stat().st_size == part["bytes"]:
                    self.parts[part["name"]] = part
            log.info("resuming the prepare of %s: %d part(s) already written", self.out, len(self.parts))
        elif self.out.is_dir() and any(self.out.iterdir()):
            raise ConfigError(
                f"data.path={self.out} is not empty and was not written by a prepare; choose a new or empty folder"
            )

    def done(self, name: str) -> bool:
        return name in self.parts

    def add(self, name: str, write: Callable[[Path], dict[str, Any] | None]) -> dict[str, Any]:
        """Write the part `name` with ``write(temp_path)`` unless an earlier run did; return its record.

        `write` may return facts to keep in the record, such as a sample count."""
        if name in self.parts:
            return self.parts[name]
        progress = self.out / PROGRESS
        if not progress.exists():
            self.out.mkdir(parents=True, exist_ok=True)
            progress.write_text(json.dumps(self.header) + "\n")
        target = self.out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with files.atomic_path(target) as tmp:
            extra = write(tmp) or {}
        record = {"name": name, "bytes": target.stat().st_size, "sha256": sha256(target), **extra}
        with open(progress, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.parts[name] = record
        return record

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        """Write the manifest, which marks the folder complete, and drop the progress file."""
        manifest = {**self.header, "parts": list(self.parts.values()), "info": info}
        files.write_json(self.out / MANIFEST, manifest)
        (self.out / PROGRESS).unlink(missing_ok=True)
        return manifest


def read_manifest(
    path: str | Path, kind: str, command: str, source: str | Path | None = None, fetched_from: str | None = None
) -> dict[str, Any]:
    """Read the manifest of the prepared folder `path`, raising ConfigError when the folder is unusable.

    It is refused when missing, partial, of another kind, stale against `source` or damaged; the message names
    `command`, which prepares it. For data on a server, `fetched_from` is the URL the manifest came from. Messages
    name it, and the parts are checked by :func:`check_part` as they arrive instead of here."""
    folder = Path(path).expanduser()
    shown = fetched_from or path
    manifest_path = folder / MANIFEST
    if not folder.is_dir():
        raise ConfigError(f"data.path={shown} does not exist; prepare it with: {command}")
    if not manifest_path.is_file():
        if (folder / PROGRESS).is_file():
            raise ConfigError(
                f"data.path={shown} is a partial prepare (interrupted: no {MANIFEST}); run the same prepare again to "
                f"finish it: {command}"
            )
        raise ConfigError(
            f"data.path={shown} has no {MANIFEST}, so it is not prepared data; prepare it with: {command}"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{shown}/{MANIFEST} is unreadable ({err}); prepare the data again") from None
    if manifest.get("kind") != kind:
        raise ConfigError(
            f"data.path={shown} holds {manifest.get('kind')} data, not {kind}; prepare it with: {command}"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ConfigError(
            f"data.path={shown} was prepared in format {manifest.get('format_version')}, this version reads "
            f"{FORMAT_VERSION}; prepare it again into a new folder: {command}"
        )
    if source is not None and manifest["source"] is not None:
        if source_label(source) != manifest["source"]:
            raise ConfigError(
                f"data.path={shown} was prepared from {manifest['source']}, not data.source={source}; give the source "
                f"it was prepared from, or prepare this one into another data.path: {command}"
            )
        if Path(source).expanduser().exists() and fingerprint(source) != manifest["source_fingerprint"]:
            raise ConfigError(
                f"data.path={shown} is stale: {source} has changed since it was prepared; prepare it again into a "
                f"new folder: {command}"
            )
    if fetched_from is None:
        for part in manifest["parts"]:
            check_part(folder / part["name"], part, shown)
    return manifest


def check_part(file: Path, part: dict[str, Any], shown: str | Path) -> None:
    """Check a part exists with the size the manifest records; a stat is cheap enough for every start."""
    size = file.stat().st_size if file.is_file() else None
    if size != part["bytes"]:
        found = "is missing" if size is None else f"has {size} bytes, the manifest says {part['bytes']}"
        raise ConfigError(
            f"data.path={shown} is damaged: {part['name']} {found}; restore it, or prepare again into a new folder"
        )


def verify(path: str | Path, manifest: dict[str, Any]) -> None:
    """Check every part's sha256 against the manifest; a UserError names the first that differs."""
    from tqdm import tqdm

    folder = Path(path).expanduser()
    for part in tqdm(manifest["parts"], unit="part", desc=f"checking {folder}"):
        if sha256(folder / part["name"]) != part["sha256"]:
            raise UserError(
                f"{folder / part['name']} does not match its checksum in {folder / MANIFEST}: it was changed or "
                "damaged after the prepare; restore it, or prepare again into a new folder"
            )
    log.info("%s: every part matches its checksum", folder)
