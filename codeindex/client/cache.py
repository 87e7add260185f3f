"""The chunk cache: a file's chunk refs keyed by its (size, mtime_ns), so that a re-sync of an
unchanged tree is a stat walk and reads no file.

Kept in the client's state folder (`chunks.json`); holds hashes and line ranges, never text,
and the root hash the cached files make: when every file of a walk matches its entry, that is
the tree's root and the sync sends it without building the tree. Like git's index, it
distrusts an entry whose mtime is within `RACY_NS` of the moment the cache was written: a file
edited again in the same timestamp tick after a sync would otherwise keep a stale entry (its
size and mtime unchanged). Such a file is read once more at the next sync.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeindex.client.chunking import CHUNKER_VERSION
from codeindex.protocol import ChunkRef
from ground.durable import write_durably

RACY_NS = 1_000_000_000  # coarser than any local filesystem's mtime tick (FAT's 2 s aside)


@dataclass(frozen=True)
class CachedFile:
    """What a file was cut into at (size, mtime_ns): `chunks` as [hash, start, end] lists
    (kept raw: an unchanged re-sync never needs them as objects); None: not text."""

    size: int
    mtime_ns: int
    chunks: list[list[Any]] | None

    @classmethod
    def of(cls, size: int, mtime_ns: int, refs: Iterable[ChunkRef] | None) -> CachedFile:
        chunks = None if refs is None else [[c.hash, c.start, c.end] for c in refs]
        return cls(size, mtime_ns, chunks)

    def refs(self) -> tuple[ChunkRef, ...]:
        return tuple(ChunkRef(h, start, end) for h, start, end in self.chunks or ())


class ChunkCache:
    """Cached chunk refs by workspace-relative path, valid for one chunker and `max_lines`;
    `root` is the tree root of exactly these entries under the key `key_id`, if known."""

    def __init__(self, max_lines: int, key_id: str, entries: dict[str, CachedFile] | None = None,
                 written_ns: int = 0, root: str | None = None) -> None:  # fmt: skip
        self.max_lines = max_lines
        self.key_id = key_id
        self._entries = entries or {}
        self._written_ns = written_ns
        self.root = root
        self.dirty = False

    @classmethod
    def load(cls, path: Path, max_lines: int, key_id: str) -> ChunkCache:
        """The cache at `path`; an empty one if there is none, it is damaged, or it was made
        by another chunker version or `max_lines` (every file is then read once). A root made
        under another key (`key_id`) is dropped."""
        try:
            data = json.loads(path.read_text())
            if data["chunker"] != CHUNKER_VERSION or data["max_lines"] != max_lines:
                return cls(max_lines, key_id)
            entries = {
                rel: CachedFile(size, mtime, chunks)
                for rel, (size, mtime, chunks) in data["files"].items()
            }
            root = data.get("root") if data.get("key_id") == key_id else None
            return cls(max_lines, key_id, entries, int(data["written_ns"]), root)
        except (OSError, ValueError, KeyError, TypeError):
            return cls(max_lines, key_id)

    @staticmethod
    def load_refs(path: Path) -> dict[str, tuple[ChunkRef, ...]]:
        """Each file's chunk refs in a cache file, whatever chunker made it (a file that is
        not text has none; {} if there is no cache or it is damaged): where the chunks of the
        last walk lie, for a search."""
        try:
            files = json.loads(path.read_text())["files"]
            return {rel: CachedFile(size, mtime, chunks).refs()
                    for rel, (size, mtime, chunks) in files.items()}  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def get(self, rel: str, size: int, mtime_ns: int) -> CachedFile | None:
        """The entry of `rel` if the file still has this size and mtime (and the entry is
        not racy), else None: the file must be read."""
        entry = self._entries.get(rel)
        if entry is None or entry.size != size or entry.mtime_ns != mtime_ns:
            return None
        if mtime_ns >= self._written_ns - RACY_NS:
            return None
        return entry

    def paths(self) -> list[str]:
        """The workspace-relative paths the cache holds (the files of the last walk)."""
        return list(self._entries)

    def put(self, rel: str, entry: CachedFile) -> None:
        self._entries[rel] = entry
        self.root = None
        self.dirty = True

    def retain(self, rels: Iterable[str]) -> None:
        """Forget every file not in `rels` (deleted, ignored or now too large)."""
        keep = set(rels)
        gone = [rel for rel in self._entries if rel not in keep]
        for rel in gone:
            del self._entries[rel]
        if gone:
            self.root = None
            self.dirty = True

    def save(self, path: Path, root: str) -> None:
        """Write the cache (atomically) with the root its entries make, if either changed."""
        if not self.dirty and root == self.root:
            return
        self.root = root
        self._written_ns = time.time_ns()
        files = {rel: [e.size, e.mtime_ns, e.chunks] for rel, e in self._entries.items()}
        data = {"chunker": CHUNKER_VERSION, "max_lines": self.max_lines, "key_id": self.key_id,
                "root": root, "written_ns": self._written_ns, "files": files}  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_durably(path, json.dumps(data, separators=(",", ":")).encode())
        self.dirty = False
