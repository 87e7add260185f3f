"""The sync protocol's operations over an index state, an embedder and the event log.

Every change is published first and applied to the state once the broker has acknowledged it,
so the state never runs ahead of the log that rebuilds it (a failed publish changes nothing and
the client retries). One writer lock orders a server's changes (plan, publish, apply); reads
only take the state's own short lock. Chunk texts live only inside `embed_chunks`: embedded,
then dropped; they reach no log line, event or field.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from codeindex.protocol import FileEntry
from codeindex.server.embedder import ChunkEmbedder
from codeindex.server.errors import IndexRequestError
from codeindex.server.events import IndexEventLog
from codeindex.server.metrics import IndexMetrics
from codeindex.server.state import IndexState, SearchHit

UNEMBEDDED_LISTED = 1000  # most chunk hashes a `root` answer lists as still missing


class IndexService:
    """What each endpoint does, given parsed and validated input."""

    def __init__(
        self,
        state: IndexState,
        embedder: ChunkEmbedder,
        events: IndexEventLog,
        *,
        embed_batch: int = 64,
    ) -> None:
        if embedder.dim != state.dim:
            raise ValueError(f"embedder dim {embedder.dim} != state dim {state.dim}")
        self.state = state
        self.embedder = embedder
        self._events = events
        self.metrics = IndexMetrics(
            workspaces=lambda: float(len(state.workspaces())),
            embeddings=lambda: float(state.embedding_count()),
        )
        self._embed_batch = embed_batch
        self._write = threading.Lock()

    def root(self, ws: str, root: str) -> dict[str, object]:
        """Whether the client's root equals the workspace's, and the chunks of the workspace's
        tree that still lack an embedding (a sync cut short between `files` and `chunks`)."""
        return {
            "in_sync": self.state.root(ws) == root,
            "missing": self.state.unembedded(ws, UNEMBEDDED_LISTED),
        }

    def children(self, ws: str, dirs: Sequence[str]) -> dict[str, object]:
        self._require(ws)
        return {"children": self.state.children(ws, dirs)}

    def files(self, ws: str, upserts: Sequence[FileEntry], deletes: Sequence[str]) -> list[str]:
        """Apply a `files` request; the chunks of its upserts that have no embedding yet."""
        with self._write:
            changes = self.state.plan_files(ws, upserts, deletes)
            self._events.publish_files(ws, changes)
            for path, entry in changes:
                self.state.apply_file(ws, path, entry)
        chunks = [c.hash for entry in upserts for c in entry.chunks]
        missing = self.state.missing(chunks)
        self.metrics.cache_hits.inc(len(set(chunks)) - len(missing))
        return missing

    def embed_chunks(self, ws: str, chunks: Sequence[tuple[str, str]]) -> int:
        """Embed the texts of (hash, text) pairs whose hashes were checked; publish the vectors;
        the number newly embedded. Chunks already embedded are skipped (a retry costs nothing);
        a chunk not in the workspace's tree is refused (422): the server embeds only what a
        synced tree holds."""
        self._require(ws)
        strangers = [h for h, _ in chunks if not self.state.holds(ws, h)]
        if strangers:
            raise IndexRequestError(
                422, f"chunk {strangers[0]} is not in workspace {ws}'s tree "
                f"({len(strangers)} such); send its file with POST .../files first",
            )  # fmt: skip
        todo = {h: text for h, text in chunks if not self.state.embedded(h)}
        if not todo:
            return 0
        hashes = list(todo)
        vectors = self.embedder.encode(list(todo.values()), batch_size=self._embed_batch)
        del todo  # no reference to a text outlives the encode
        by_chunk = dict(zip(hashes, np.asarray(vectors, dtype=np.float16), strict=True))
        with self._write:
            self._events.publish_embeddings(by_chunk)
            for chunk, vector in by_chunk.items():
                self.state.add_embedding(chunk, vector)
        self.metrics.chunks_embedded.inc(len(by_chunk))
        return len(by_chunk)

    def search(self, ws: str, query: str, top_k: int, prefix: str | None) -> list[SearchHit]:
        return self.search_scored(ws, query, top_k, prefix, ())[0]

    def search_scored(
        self, ws: str, query: str, top_k: int, prefix: str | None, scored: Sequence[str]
    ) -> tuple[list[SearchHit], dict[str, float]]:
        """`search`, plus the cosine similarity of each chunk of `scored` that `ws` holds (the
        client's lexical candidates, for its fusion); one query embedding for both."""
        self._require(ws)
        started = time.perf_counter()
        vector = self.embedder.encode([query])[0]
        hits = self.state.search(ws, vector, top_k, prefix)
        scores = self.state.scores(ws, vector, scored) if scored else {}
        self.metrics.search_seconds.observe(time.perf_counter() - started)
        return hits, scores

    def status(self, ws: str) -> dict[str, object]:
        self._require(ws)
        embedder = {"name": self.embedder.name, "version": self.embedder.version,
                    "dim": self.embedder.dim}  # fmt: skip
        return {"workspace": ws, **self.state.status(ws), "embedder": embedder}

    def erase(self, ws: str) -> dict[str, object]:
        """Erase the workspace: a tombstone for each of its files, then for every embedding no
        workspace holds any more; both topics' compaction then removes them from the log."""
        self._require(ws)
        with self._write:
            paths, orphans = self.state.erase_plan(ws)
            self._events.publish_files(ws, [(p, None) for p in paths])
            for path in paths:
                self.state.apply_file(ws, path, None)
            self._events.publish_dropped(orphans)
            for chunk in orphans:
                self.state.drop_embedding(chunk)
        return {"workspace": ws, "files_removed": len(paths), "embeddings_removed": len(orphans)}

    def _require(self, ws: str) -> None:
        if not self.state.known(ws):
            raise IndexRequestError(
                404, f"unknown workspace {ws}: nothing synced to this server (or it was erased); "
                "sync it first",
            )  # fmt: skip
