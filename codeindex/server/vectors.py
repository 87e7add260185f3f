"""One workspace's vector index: its chunks' embeddings in a usearch HNSW index, cosine metric.

Only the workspace's own chunks are in it (the content proof: a search cannot reach a chunk the
caller never synced). usearch keys are integers, so each chunk hash gets one, counting up; a
removed chunk's key is never reused (usearch marks it deleted). Vectors are stored as float16,
the precision the `index.embeddings` topic carries, so a replica rebuilt from the topic holds
exactly the writer's vectors. Below `EXACT_BELOW` vectors a search is exhaustive (under a
millisecond at 20,000 x 256 on one core): exact, so every replica ranks alike whatever order it
inserted in; above it, HNSW's approximate search.

Not thread-safe: `codeindex.server.state.IndexState` serialises access.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray
from usearch.index import Index

EXACT_BELOW = 20_000


class WorkspaceVectors:
    """Chunk hash -> vector for one workspace, searchable by cosine similarity."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._index = Index(ndim=dim, metric="cos", dtype="f16")
        self._keys: dict[str, int] = {}  # chunk hash -> usearch key
        self._chunks: dict[int, str] = {}  # usearch key -> chunk hash
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, chunk: str) -> bool:
        return chunk in self._keys

    def add(self, chunk: str, vector: NDArray[np.floating]) -> None:
        """Index `chunk` with `vector` [dim]; a chunk already present is left as it is (its
        vector is a function of its text and the embedder, so it cannot differ)."""
        if chunk in self._keys:
            return
        if vector.shape != (self.dim,):
            raise ValueError(f"vector of shape {vector.shape}, expected ({self.dim},)")
        key = self._next_key
        self._next_key += 1
        self._index.add(key, vector)
        self._keys[chunk] = key
        self._chunks[key] = chunk

    def remove(self, chunk: str) -> None:
        """Drop `chunk` (no-op when absent)."""
        key = self._keys.pop(chunk, None)
        if key is not None:
            del self._chunks[key]
            self._index.remove(key)

    def search(self, query: NDArray[np.floating], count: int) -> list[tuple[str, float]]:
        """The `count` nearest chunks to `query` [dim] as (chunk hash, cosine similarity),
        best first; fewer when the index holds fewer."""
        count = min(count, len(self._keys))
        if count <= 0:
            return []
        matches = self._index.search(query, count, exact=len(self._keys) < EXACT_BELOW)
        return [
            (self._chunks[int(key)], 1.0 - float(distance))
            for key, distance in zip(matches.keys, matches.distances, strict=True)
            if int(key) in self._chunks
        ]

    def chunks(self) -> Iterator[str]:
        return iter(self._keys)
