"""What an index server holds, in memory: per workspace its Merkle tree, where each chunk occurs
and its vector index; across workspaces the embedding cache (chunk hash -> vector of the
server's embedder) and which workspaces hold each chunk.

Never a chunk's text: the tree holds hashes and obfuscated paths, the cache float16 vectors.
The same `apply_file` / `add_embedding` / `drop_embedding` calls build the state from a client's
requests (the writer, `codeindex.server.service`) and from the topics (a replica,
`codeindex.server.events`), so both end equal. A workspace with no file left is dropped: whether
a workspace is known is then a function of the log, the same on every replica.

Thread-safe: every method holds one lock (searches are short, writes are a few dict updates).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from codeindex.protocol import FileEntry, Tree, parent_of
from codeindex.server.errors import IndexRequestError
from codeindex.server.vectors import WorkspaceVectors

EMPTY_ROOT = Tree().root
FileChange = tuple[str, FileEntry | None]  # (obfuscated path, its entry; None: deleted)
Places = dict[str, list[tuple[int, int]]]  # path -> the chunk's line ranges there


@dataclass(frozen=True)
class SearchHit:
    """One place a found chunk occurs: its hash, obfuscated path, line range and score."""

    chunk: str
    path: str
    start: int
    end: int
    score: float

    def to_json(self) -> dict[str, object]:
        return {"chunk": self.chunk, "path": self.path, "start": self.start, "end": self.end,
                "score": round(self.score, 6)}  # fmt: skip


@dataclass
class _Workspace:
    tree: Tree
    vectors: WorkspaceVectors
    places: dict[str, Places] = field(default_factory=dict)  # chunk -> where it occurs
    unembedded: set[str] = field(default_factory=set)  # chunks with no vector yet


def under(path: str, prefix: str | None) -> bool:
    """Whether `path` is `prefix` or inside the folder `prefix` (None: anywhere)."""
    return prefix is None or path == prefix or path.startswith(prefix + "/")


class IndexState:
    """The index of every workspace for one embedder (vectors of dimension `dim`)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.RLock()
        self._workspaces: dict[str, _Workspace] = {}
        self._embeddings: dict[str, NDArray[np.float16]] = {}
        self._holders: dict[str, set[str]] = {}  # chunk -> workspaces holding it

    # Reads -------------------------------------------------------------------------------

    def known(self, ws: str) -> bool:
        with self._lock:
            return ws in self._workspaces

    def workspaces(self) -> list[str]:
        with self._lock:
            return sorted(self._workspaces)

    def root(self, ws: str) -> str:
        """The workspace's root hash; an unknown workspace's is the empty tree's."""
        with self._lock:
            w = self._workspaces.get(ws)
            return EMPTY_ROOT if w is None else w.tree.root

    def children(self, ws: str, dirs: Sequence[str]) -> dict[str, dict[str, dict[str, str]]]:
        """Each folder's children as name -> {"kind", "hash"}; a path that is no folder of the
        workspace gets {} (the client then sends what it holds there). KeyError if unknown."""
        with self._lock:
            tree = self._workspaces[ws].tree
            out: dict[str, dict[str, dict[str, str]]] = {}
            for d in dirs:
                kids = tree.children(d) or {}
                out[d] = {name: {"kind": kind, "hash": h} for name, (kind, h) in kids.items()}
            return out

    def status(self, ws: str) -> dict[str, object]:
        """Counts and the root of a workspace; KeyError if unknown."""
        with self._lock:
            w = self._workspaces[ws]
            return {"files": len(w.tree.files), "chunks": len(w.places),
                    "chunks_embedded": len(w.vectors), "root": w.tree.root}  # fmt: skip

    def embedded(self, chunk: str) -> bool:
        with self._lock:
            return chunk in self._embeddings

    def missing(self, chunks: Iterable[str]) -> list[str]:
        """Those of `chunks` with no embedding, each once, in the order given."""
        with self._lock:
            return [c for c in dict.fromkeys(chunks) if c not in self._embeddings]

    def unembedded(self, ws: str, limit: int) -> list[str]:
        """Up to `limit` chunks of the workspace's tree without an embedding (sorted), e.g.
        after a sync cut short between `files` and `chunks`; [] for an unknown workspace."""
        with self._lock:
            w = self._workspaces.get(ws)
            return [] if w is None else sorted(w.unembedded)[:limit]

    def holds(self, ws: str, chunk: str) -> bool:
        with self._lock:
            w = self._workspaces.get(ws)
            return w is not None and chunk in w.places

    def embedding_count(self) -> int:
        with self._lock:
            return len(self._embeddings)

    def search(
        self, ws: str, query: NDArray[np.floating], top_k: int, prefix: str | None = None
    ) -> list[SearchHit]:
        """The `top_k` chunks of `ws` nearest to `query`, each with every place it occurs
        (under `prefix` when given): one hit per place, best chunk first. With a prefix the
        candidate count grows fourfold until enough chunks qualify or the index is exhausted.
        KeyError if the workspace is unknown."""
        with self._lock:
            w = self._workspaces[ws]
            count = top_k if prefix is None else 4 * top_k
            while True:
                found = w.vectors.search(query, count)
                hits: list[SearchHit] = []
                chunks = 0
                for chunk, score in found:
                    places = sorted(
                        (path, start, end)
                        for path, ranges in w.places.get(chunk, {}).items()
                        if under(path, prefix)
                        for start, end in ranges
                    )
                    if places:
                        hits.extend(SearchHit(chunk, p, s, e, score) for p, s, e in places)
                        chunks += 1
                        if chunks == top_k:
                            return hits
                if len(found) < count:
                    return hits
                count *= 4

    def scores(
        self, ws: str, query: NDArray[np.floating], chunks: Sequence[str]
    ) -> dict[str, float]:
        """The cosine similarity to `query` [dim] of each of `chunks` that is in `ws`'s tree and
        has an embedding; the others are left out (a content proof: a hash outside the caller's
        tree gets nothing). The same cosine a search reports, from the same float16 vector."""
        q = np.asarray(query, dtype=np.float32)
        q_norm = float(np.linalg.norm(q))
        with self._lock:
            w = self._workspaces.get(ws)
            if w is None:
                return {}
            held = [c for c in chunks if c in w.places and c in self._embeddings]
            if not held or q_norm == 0.0:
                return dict.fromkeys(held, 0.0)
            matrix = np.stack([self._embeddings[c] for c in held]).astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        cosines = (matrix @ q) / np.where(norms > 0, norms * q_norm, 1.0)
        return {c: float(v) for c, v in zip(held, cosines, strict=True)}

    # Planning a client's change ------------------------------------------------------------

    def plan_files(
        self, ws: str, upserts: Sequence[FileEntry], deletes: Sequence[str]
    ) -> list[FileChange]:
        """The file changes, in log order, that a `files` request makes: deletes first (a
        folder's: each file under it), then each upsert preceded by a deletion of every file it
        replaces (a file where a folder was, or at an ancestor's path), so that a replica
        replaying only the surviving records of the compacted log ends with the same tree.
        Unchanged upserts are left out. IndexRequestError (422) when two upserts of the request
        collide (the same path, or one inside the other)."""
        with self._lock:
            w = self._workspaces.get(ws)
            tree = w.tree if w is not None else Tree()
            changes: list[FileChange] = []
            gone: set[str] = set()

            def delete(path: str) -> None:
                if path not in gone:
                    gone.add(path)
                    changes.append((path, None))

            for path in deletes:
                for entry in list(tree.walk_files(path)):
                    delete(entry.path)
            new_files: set[str] = set()
            new_dirs: set[str] = set()
            for entry in upserts:
                ancestors = _ancestors(entry.path)
                if (
                    entry.path in new_files
                    or entry.path in new_dirs
                    or not new_files.isdisjoint(ancestors)
                ):
                    raise IndexRequestError(
                        422, f"upsert {entry.path!r} collides with another upsert of the same "
                        "request (the same path, or a file inside a file); send each path once",
                    )  # fmt: skip
                new_files.add(entry.path)
                new_dirs.update(ancestors)
                if tree.files.get(entry.path) == entry and entry.path not in gone:
                    continue
                for ancestor in ancestors:
                    if ancestor in tree.files:
                        delete(ancestor)
                if entry.path not in tree.files and tree.hash_of(entry.path) is not None:
                    for inner in list(tree.walk_files(entry.path)):
                        delete(inner.path)
                changes.append((entry.path, entry))
            return changes

    def erase_plan(self, ws: str) -> tuple[list[str], list[str]]:
        """(the workspace's file paths, the embeddings no workspace would hold after erasing it:
        its own chunks no other workspace holds, and any left over from earlier deletes)."""
        with self._lock:
            w = self._workspaces.get(ws)
            paths = sorted(w.tree.files) if w is not None else []
            orphans = sorted(c for c in self._embeddings if self._holders.get(c, set()) <= {ws})
            return paths, orphans

    # Changes (from requests and from the log alike) ----------------------------------------

    def apply_file(self, ws: str, path: str, entry: FileEntry | None) -> None:
        """Set the file at `path` to `entry` (None: delete it), keeping each chunk's places,
        holders and vectors in step."""
        with self._lock:
            w = self._workspaces.get(ws)
            if entry is None:
                if w is None or path not in w.tree.files:
                    return
                dropped: set[str] = set()
                self._forget(w, w.tree.files[path], dropped)
                w.tree.delete(path)
                self._cleanup(ws, w, dropped)
                if not w.tree.files:
                    del self._workspaces[ws]
                return
            if w is None:
                w = self._workspaces[ws] = _Workspace(Tree(), WorkspaceVectors(self.dim))
            tree, dropped = w.tree, set()
            replaced = [tree.files[a] for a in _ancestors(path) if a in tree.files]
            if path in tree.files:
                replaced.append(tree.files[path])
            elif tree.hash_of(path) is not None:  # a folder becomes a file
                replaced.extend(tree.walk_files(path))
            for old in replaced:
                self._forget(w, old, dropped)
            tree.upsert(entry)  # the tree drops what `entry` replaces itself
            self._remember(ws, w, entry)
            self._cleanup(ws, w, dropped)

    def add_embedding(self, chunk: str, vector: NDArray[np.floating]) -> None:
        """Cache `chunk`'s vector [dim] (as float16) and index it in every workspace holding it."""
        if vector.shape != (self.dim,):
            raise ValueError(f"a vector of shape {vector.shape}; this index holds ({self.dim},)")
        half = np.asarray(vector, dtype=np.float16)
        with self._lock:
            self._embeddings[chunk] = half
            for ws in self._holders.get(chunk, ()):
                w = self._workspaces[ws]
                w.vectors.add(chunk, half)
                w.unembedded.discard(chunk)

    def drop_embedding(self, chunk: str) -> None:
        """Forget `chunk`'s vector everywhere (its tombstone)."""
        with self._lock:
            if self._embeddings.pop(chunk, None) is None:
                return
            for ws in self._holders.get(chunk, ()):
                w = self._workspaces[ws]
                w.vectors.remove(chunk)
                w.unembedded.add(chunk)

    def _remember(self, ws: str, w: _Workspace, entry: FileEntry) -> None:
        for c in entry.chunks:
            places = w.places.setdefault(c.hash, {})
            if not places:  # new in this workspace
                self._holders.setdefault(c.hash, set()).add(ws)
                vector = self._embeddings.get(c.hash)
                if vector is None:
                    w.unembedded.add(c.hash)
                else:
                    w.vectors.add(c.hash, vector)
            places.setdefault(entry.path, []).append((c.start, c.end))

    @staticmethod
    def _forget(w: _Workspace, entry: FileEntry, dropped: set[str]) -> None:
        for c in entry.chunks:
            places = w.places.get(c.hash)
            if places is not None and places.pop(entry.path, None) is not None and not places:
                del w.places[c.hash]
                dropped.add(c.hash)

    def _cleanup(self, ws: str, w: _Workspace, dropped: set[str]) -> None:
        """Chunks that left the workspace (and did not come back) leave its index."""
        for chunk in dropped:
            if chunk in w.places:
                continue
            w.vectors.remove(chunk)
            w.unembedded.discard(chunk)
            holders = self._holders.get(chunk)
            if holders is not None:
                holders.discard(ws)
                if not holders:
                    del self._holders[chunk]


def _ancestors(path: str) -> list[str]:
    out = []
    parent = parent_of(path)
    while parent:
        out.append(parent)
        parent = parent_of(parent)
    return out
