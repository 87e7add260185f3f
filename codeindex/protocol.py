"""The codebase index's sync protocol: hashes, file entries and the Merkle tree (docs/index.md).

Pure and stdlib-only: the client builds its tree with it from its own files, the server builds
the same tree from the file entries it was sent, and both get the same root hash byte for byte.
Paths here are *obfuscated* workspace-relative paths (segments joined with `/`); the tree never
sees a real file name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

HASH_RE = re.compile(r"[0-9a-f]{64}")
SEGMENT_RE = re.compile(r"[0-9a-f]{20}")  # an obfuscated path segment (docs/index.md)
DIR, FILE = "dir", "file"
ROOT = ""


def chunk_hash(text: str) -> str:
    """A chunk's identity: unkeyed, so identical chunks of two workspaces are embedded once."""
    return hashlib.sha256(b"chunk\0" + text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChunkRef:
    """A chunk of a file: its hash and its 1-based inclusive line range."""

    hash: str
    start: int
    end: int

    def to_json(self) -> dict[str, object]:
        return {"hash": self.hash, "start": self.start, "end": self.end}


@dataclass(frozen=True)
class FileEntry:
    """A file as the server knows it: obfuscated path, hash and chunks (in file order)."""

    path: str
    hash: str
    chunks: tuple[ChunkRef, ...]

    @classmethod
    def of(cls, path: str, chunks: Sequence[ChunkRef]) -> FileEntry:
        """The entry of `chunks` at `path`, its hash computed."""
        return cls(path, file_hash(path.rsplit("/", 1)[-1], chunks), tuple(chunks))

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "hash": self.hash, "chunks": [c.to_json() for c in self.chunks]}


def file_hash(name: str, chunks: Sequence[ChunkRef]) -> str:
    """A file node's hash from its obfuscated name and its chunks."""
    h = hashlib.sha256(b"file\0" + name.encode() + b"\0")
    for c in chunks:
        h.update(f"{c.hash},{c.start},{c.end};".encode())
    return h.hexdigest()


def dir_hash(name: str, children: Mapping[str, tuple[str, str]]) -> str:
    """A folder node's hash from its obfuscated name and its children (name -> (kind, hash))."""
    h = hashlib.sha256(b"dir\0" + name.encode() + b"\0")
    for child in sorted(children):
        kind, child_hash = children[child]
        h.update(f"{kind} {child} {child_hash}\n".encode())
    return h.hexdigest()


def parent_of(path: str) -> str:
    """The folder holding `path` (ROOT for a top-level name)."""
    return path.rsplit("/", 1)[0] if "/" in path else ROOT


def path_problem(path: str) -> str | None:
    """Why `path` is not an obfuscated path, or None: segments of 20 lower-case hex digits."""
    if not path or not all(SEGMENT_RE.fullmatch(s) for s in path.split("/")):
        return f"{path[:80]!r} is not an obfuscated path (segments of 20 hex digits joined by /)"
    return None


@dataclass
class _Dir:
    children: dict[str, str] = field(default_factory=dict)  # name -> DIR | FILE
    hash: str | None = None  # None: to recompute


class Tree:
    """A workspace's Merkle tree, built from file entries.

    Folder hashes are cached and invalidated along the path of a change, so an upsert costs
    O(depth) and the root costs one hash per changed folder: a 10,000-file tree re-hashes in
    milliseconds after a few edits.
    """

    def __init__(self, files: Iterable[FileEntry] = ()) -> None:
        self._files: dict[str, FileEntry] = {}
        self._dirs: dict[str, _Dir] = {ROOT: _Dir()}
        for entry in files:
            self.upsert(entry)

    @property
    def files(self) -> Mapping[str, FileEntry]:
        return self._files

    def upsert(self, entry: FileEntry) -> None:
        """Add or replace the file at `entry.path`; a folder at that path, or a file at one of
        its ancestors' paths, is replaced (a kind change)."""
        path = entry.path
        if path in self._dirs:
            self.delete(path)
        ancestor = parent_of(path)
        while ancestor != ROOT:
            if ancestor in self._files:
                self.delete(ancestor)
                break
            ancestor = parent_of(ancestor)
        self._files[path] = entry
        name, kind = path, FILE
        while True:
            parent = parent_of(name)
            folder = self._dirs.setdefault(parent, _Dir())
            folder.children[self._name(name)] = kind
            folder.hash = None
            if parent == ROOT:
                return
            name, kind = parent, DIR

    def delete(self, path: str) -> list[str]:
        """Remove the file at `path`, or every file under the folder `path`; the paths removed."""
        if path in self._files:
            removed = [path]
        else:
            prefix = path + "/"
            removed = [p for p in self._files if p.startswith(prefix)]
        for p in removed:
            del self._files[p]
        for d in [d for d in self._dirs if d == path or d.startswith(path + "/")]:
            if d != ROOT:
                del self._dirs[d]
        self._unlink(path)
        return removed

    def _unlink(self, path: str) -> None:
        # Drop `path` from its parent; a parent left empty goes too (git-like: no empty folders).
        while path != ROOT:
            parent = parent_of(path)
            folder = self._dirs.get(parent)
            if folder is None:
                return
            folder.children.pop(self._name(path), None)
            folder.hash = None
            if folder.children or parent == ROOT:
                self._invalidate(parent)
                return
            del self._dirs[parent]
            path = parent

    def _invalidate(self, path: str) -> None:
        while True:
            folder = self._dirs.get(path)
            if folder is not None:
                folder.hash = None
            if path == ROOT:
                return
            path = parent_of(path)

    @staticmethod
    def _name(path: str) -> str:
        return path.rsplit("/", 1)[-1]

    def _child_path(self, folder: str, name: str) -> str:
        return f"{folder}/{name}" if folder else name

    def hash_of(self, path: str) -> str | None:
        """The hash of the file or folder at `path` (ROOT: the root), None if there is none."""
        if path in self._files:
            return self._files[path].hash
        folder = self._dirs.get(path)
        if folder is None:
            return None
        if folder.hash is None:
            children = self._children(path, folder)
            folder.hash = dir_hash(self._name(path), children)
        return folder.hash

    @property
    def root(self) -> str:
        root = self.hash_of(ROOT)
        assert root is not None  # the root folder always exists
        return root

    def _children(self, path: str, folder: _Dir) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for name, kind in folder.children.items():
            child = self.hash_of(self._child_path(path, name))
            if child is not None:
                out[name] = (kind, child)
        return out

    def children(self, path: str) -> dict[str, tuple[str, str]] | None:
        """The folder's children as name -> (kind, hash), None if `path` is not a folder."""
        folder = self._dirs.get(path)
        return None if folder is None else self._children(path, folder)

    def chunk_hashes(self) -> set[str]:
        return {c.hash for f in self._files.values() for c in f.chunks}

    def walk_files(self, prefix: str = ROOT) -> Iterator[FileEntry]:
        """Every file under the folder `prefix` (ROOT: all), or the file `prefix` itself."""
        if prefix in self._files:
            yield self._files[prefix]
            return
        start = prefix + "/" if prefix else ""
        for path, entry in self._files.items():
            if path.startswith(start):
                yield entry


@dataclass(frozen=True)
class Difference:
    """What a client must send for the server's tree to equal its own."""

    upserts: list[FileEntry]
    deletes: list[str]


def diff_children(
    mine: Mapping[str, tuple[str, str]], theirs: Mapping[str, tuple[str, str]]
) -> tuple[list[str], list[str], list[str]]:
    """Compare one folder's children: (names to descend into — folders on both sides with
    different hashes, names whose file must be sent — new or changed files and anything that
    changed kind, names to delete — on their side only)."""
    descend, send, delete = [], [], []
    for name, (kind, h) in mine.items():
        other = theirs.get(name)
        if other == (kind, h):
            continue
        if kind == DIR and other is not None and other[0] == DIR:
            descend.append(name)
        else:
            send.append(name)
    delete = [name for name in theirs if name not in mine]
    return sorted(descend), sorted(send), sorted(delete)
