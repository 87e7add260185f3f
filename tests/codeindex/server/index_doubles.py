"""Test doubles of the index server: a deterministic embedder, a record sink, tiny workspaces."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from codeindex.protocol import ChunkRef, FileEntry, Tree, chunk_hash
from streams.errors import TopicIOError

WORD = re.compile(r"[A-Za-z]+")


class BagOfWordsEmbedder:
    """Hashed bag of words -> L2-normalised vector: texts sharing words are near each other."""

    def __init__(self, dim: int = 64, name: str = "test-bow", version: str = "1") -> None:
        self.name, self.version, self.dim = name, version, dim
        self.calls = 0

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float32]:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in WORD.findall(text.lower()):
                digest = hashlib.sha256(word.encode()).digest()
                out[row, int.from_bytes(digest[:4], "little") % self.dim] += 1.0
            norm = float(np.linalg.norm(out[row]))
            out[row] = out[row] / norm if norm else out[row]
        return out


@dataclass
class Record:
    topic: str
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


@dataclass
class MemorySink:
    """Records what it is sent, as a producer would write it; `fail` makes flush raise."""

    records: list[Record] = field(default_factory=list)
    pending: list[Record] = field(default_factory=list)
    fail: bool = False

    def send(self, topic: str, key: str | bytes | None, value: bytes | None,
             headers: Sequence[tuple[str, bytes]] | None = None) -> None:  # fmt: skip
        raw = key.encode() if isinstance(key, str) else key or b""
        self.pending.append(Record(topic, raw, value, list(headers or ())))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if self.fail:
            raise TopicIOError("the broker is down (test)")
        self.records.extend(pending)


def segment(name: str) -> str:
    """A stand-in obfuscated segment (20 hex digits) for a readable name."""
    return hashlib.sha256(name.encode()).hexdigest()[:20]


def obf(path: str) -> str:
    return "/".join(segment(s) for s in path.split("/"))


@dataclass
class Workspace:
    """A client-side workspace: real paths -> chunk texts, with its tree of obfuscated paths."""

    files: dict[str, list[str]]
    ws: str = field(default_factory=lambda: str(uuid.uuid4()))

    def entry(self, path: str) -> FileEntry:
        refs, line = [], 1
        for text in self.files[path]:
            lines = text.count("\n") + 1
            refs.append(ChunkRef(chunk_hash(text), line, line + lines - 1))
            line += lines
        return FileEntry.of(obf(path), refs)

    def entries(self) -> list[FileEntry]:
        return [self.entry(p) for p in sorted(self.files)]

    def tree(self) -> Tree:
        return Tree(self.entries())

    def texts(self) -> dict[str, str]:
        return {chunk_hash(t): t for texts in self.files.values() for t in texts}
