"""The chunk cache: a file's chunk refs keyed by its (size, mtime_ns), so that a re-sync of an
unchanged tree is a stat walk and reads no file.

Kept in the client's state folder (`chunks.json`); holds hashes and line ranges, never text.
Like git's index, it distrusts an entry whose mtime is within `RACY_NS` of the moment the cache
was written: a file edited again in the same timestamp tick after a sync would otherwise keep a
stale entry (its size and mtime unchanged). Such a file is read once more at the next sync.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from codeindex.client.chunking import CHUNKER_VERSION
from codeindex.protocol import ChunkRef
from ground.durable import write_durably

RACY_NS = 1_000_000_000  # coarser than any local filesystem's mtime tick (FAT's 2 s aside)


@dataclass(frozen=True)
class CachedFile:
    """What a file was cut into at (size, mtime_ns); `chunks` None: not text (skipped)."""

    size: int
    mtime_ns: int
    chunks: tuple[ChunkRef, ...] | None


class ChunkCache:
    """Cached chunk refs by workspace-relative path, valid for one chunker and `max_lines`."""

    def __init__(self, max_lines: int, entries: dict[str, CachedFile] | None = None,
                 written_ns: int = 0) -> None:  # fmt: skip
        self.max_lines = max_lines
        self._entries = entries or {}
        self._written_ns = written_ns
        self.dirty = False

    @classmethod
    def load(cls, path: Path, max_lines: int) -> ChunkCache:
        """The cache at `path`; an empty one if there is none, it is damaged, or it was made
        by another chunker version or `max_lines` (every file is then read once)."""
        try:
            data = json.loads(path.read_text())
            if data["chunker"] != CHUNKER_VERSION or data["max_lines"] != max_lines:
                return cls(max_lines)
            entries = {
                rel: CachedFile(
                    size, mtime, None if chunks is None else tuple(ChunkRef(*c) for c in chunks)
                )
                for rel, (size, mtime, chunks) in data["files"].items()
            }
            return cls(max_lines, entries, int(data["written_ns"]))
        except (OSError, ValueError, KeyError, TypeError):
            return cls(max_lines)

    @staticmethod
    def load_paths(path: Path) -> list[str]:
        """The paths a cache file holds, whatever chunker made it ([] if none or damaged)."""
        try:
            return list(json.loads(path.read_text())["files"])
        except (OSError, ValueError, KeyError, TypeError):
            return []

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
        self.dirty = True

    def retain(self, rels: Iterable[str]) -> None:
        """Forget every file not in `rels` (deleted, ignored or now too large)."""
        keep = set(rels)
        gone = [rel for rel in self._entries if rel not in keep]
        for rel in gone:
            del self._entries[rel]
        self.dirty = self.dirty or bool(gone)

    def save(self, path: Path) -> None:
        """Write the cache (atomically) if it changed since it was loaded."""
        if not self.dirty:
            return
        self._written_ns = time.time_ns()
        files = {
            rel: [e.size, e.mtime_ns, None if e.chunks is None else
                  [[c.hash, c.start, c.end] for c in e.chunks]]
            for rel, e in self._entries.items()
        }  # fmt: skip
        data = {"chunker": CHUNKER_VERSION, "max_lines": self.max_lines,
                "written_ns": self._written_ns, "files": files}  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_durably(path, json.dumps(data, separators=(",", ":")).encode())
        self.dirty = False
