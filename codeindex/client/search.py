"""Searching the index from the client (docs/index.md, "Search"): a hybrid of the server's
cosine similarity and the client's own BM25, fused on the client.

1. BM25 over the chunks of the last walk (`codeindex.client.lexical`; term counts kept only in
   the client's state) proposes its top N candidates, N = max(50, 5 x top_k).
2. One `search` request asks the server for its top N by cosine (at most the server's 100) and
   for the cosine of each BM25 candidate (hashes only: the client's terms never leave it).
3. `codeindex.client.ranking.weighted_fusion` fuses the two, 0.5 x cosine + 0.5 x BM25 / the
   query's best BM25 score by default (`lexical_weight` 0: the server's ranking alone); a
   candidate the server holds no vector for (not synced yet) is left out.
4. The best chunks are mapped to their places in the last walk and read from the client's own
   disk; a place whose lines no longer hash to the chunk (the file changed since the sync) is
   dropped, and the next candidate takes its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

from codeindex.client.api import IndexClient
from codeindex.client.cache import ChunkCache
from codeindex.client.chunking import lines_text, split_lines
from codeindex.client.errors import IndexClientError
from codeindex.client.lexical import LexicalIndex
from codeindex.client.ranking import LEXICAL_WEIGHT, candidate_count, top, weighted_fusion
from codeindex.client.state import WorkspaceState
from codeindex.client.workspace import read_text
from codeindex.protocol import chunk_hash

DEFAULT_TOP_K = 10
MAX_TOP_K = 100  # the server's bound (docs/index.md)
Place = tuple[str, int, int]  # a workspace-relative path, 1-based inclusive lines


@dataclass(frozen=True)
class SearchHit:
    """A result in the client's terms: a real path, 1-based inclusive lines, the fused score
    (the cosine alone with `lexical_weight` 0), the code."""

    path: str
    start: int
    end: int
    score: float
    text: str


def search(
    workspace: Path,
    url: str,
    api_key: str | None,
    query: str,
    *,
    top_k: int = DEFAULT_TOP_K,
    path_prefix: str | None = None,
    lexical_weight: float = LEXICAL_WEIGHT,
    state_root: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> list[SearchHit]:
    """The `top_k` chunks of the synced `workspace` that best match `query`, best first, only
    those under `path_prefix` (a workspace-relative or absolute path of a file or folder, whole
    segments) when given; each with every place it occurs. `lexical_weight` (0..1) is BM25's
    share of the fused score (module docstring). Places stale on disk are dropped, so fewer
    than `top_k` may come back. Raises IndexClientError if the workspace was never synced or
    an argument is out of range."""
    if not 1 <= top_k <= MAX_TOP_K:
        raise IndexClientError(f"top_k must be within 1..{MAX_TOP_K}, not {top_k}")
    if not 0.0 <= lexical_weight <= 1.0:
        raise IndexClientError(f"lexical_weight must be within 0..1, not {lexical_weight}")
    store = WorkspaceState(workspace, state_root)
    if not store.exists():
        raise IndexClientError(
            f"{store.workspace} has not been synced; run `flywheel index sync {workspace}` first"
        )
    state = store.load()
    prefix = _relative_prefix(store.workspace, path_prefix)
    obf_prefix = store.obfuscator().path(prefix) if prefix else None
    places = _places(store, prefix)
    bm25: dict[str, float] = {}
    lexical: dict[str, float] = {}
    dense_count = top_k
    if lexical_weight > 0:
        count = candidate_count(top_k)
        among = None if prefix is None else places
        bm25 = LexicalIndex.load(store.terms_file).scores(query, among)
        lexical = {chunk: bm25[chunk] for chunk in top(bm25, count)}
        dense_count = min(count, MAX_TOP_K)
    with IndexClient(url, api_key, state.workspace_id, transport=transport) as client:
        results, cosines = client.search_scored(query, dense_count, obf_prefix, list(lexical))
    dense = _cosines(results) | cosines
    lexical |= {chunk: bm25[chunk] for chunk in dense if chunk in bm25}
    fused = weighted_fusion(dense, lexical, lexical_weight)
    ranked = sorted((c for c in fused if c in dense), key=lambda c: -fused[c])
    return _read_hits(store.workspace, ranked, fused, places, top_k)


def _cosines(results: list[dict[str, Any]]) -> dict[str, float]:
    """Chunk hash -> cosine of the server's results, in its order (a chunk at several places
    is one candidate)."""
    out: dict[str, float] = {}
    for result in results:
        try:
            out.setdefault(str(result["chunk"]), float(result["score"]))
        except (KeyError, TypeError, ValueError):
            raise IndexClientError(f"the index server sent a malformed result: {result}") from None
    return out


def _read_hits(
    workspace: Path,
    ranked: list[str],
    scores: dict[str, float],
    places: dict[str, list[Place]],
    top_k: int,
) -> list[SearchHit]:
    """The hits of the first `top_k` chunks of `ranked` with a place whose lines on disk still
    hash to the chunk; each file is read once."""
    hits: list[SearchHit] = []
    files: dict[str, list[str] | None] = {}
    found = 0
    for chunk in ranked:
        fresh = False
        for rel, start, end in places.get(chunk, ()):
            if rel not in files:
                files[rel] = _lines(workspace / rel)
            lines = files[rel]
            if lines is None or end > len(lines):
                continue
            text = lines_text(lines, start, end)
            if chunk_hash(text) != chunk:
                continue  # changed on disk since the sync: the server's chunk is stale
            hits.append(SearchHit(rel, start, end, scores[chunk], text))
            fresh = True
        found += fresh
        if found == top_k:
            break
    return hits


def _relative_prefix(workspace: Path, path_prefix: str | None) -> str | None:
    """`path_prefix` as a workspace-relative POSIX path; None for the whole workspace."""
    if not path_prefix:
        return None
    path = Path(path_prefix)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(workspace)
        except ValueError:
            raise IndexClientError(f"{path_prefix} is not inside {workspace}") from None
    parts = PurePosixPath(path.as_posix()).parts
    if ".." in parts:
        raise IndexClientError(f"--path-prefix {path_prefix} leaves the workspace")
    rel = "/".join(p for p in parts if p not in (".", ""))
    return rel or None


def _places(store: WorkspaceState, prefix: str | None) -> dict[str, list[Place]]:
    """Chunk hash -> its places under `prefix` (None: anywhere) in the last walk (the chunk
    cache), sorted."""
    places: dict[str, list[Place]] = {}
    for rel, refs in ChunkCache.load_refs(store.cache_file).items():
        if prefix is None or rel == prefix or rel.startswith(prefix + "/"):
            for ref in refs:
                places.setdefault(ref.hash, []).append((rel, ref.start, ref.end))
    for found in places.values():
        found.sort()
    return places


def _lines(path: Path) -> list[str] | None:
    try:
        text = read_text(path)
    except OSError:
        return None
    return None if text is None else split_lines(text)
