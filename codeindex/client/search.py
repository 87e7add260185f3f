"""Searching the index from the client: the server answers with chunk hashes, obfuscated paths
and line ranges; the client maps them back to its own paths and reads the code from its own
disk (docs/index.md). A result whose lines on disk no longer hash to the chunk the server
indexed (the file changed since the last sync) is dropped, never shown with the wrong code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import httpx

from codeindex.client.api import IndexClient
from codeindex.client.cache import ChunkCache
from codeindex.client.chunking import lines_text, split_lines
from codeindex.client.errors import IndexClientError
from codeindex.client.obfuscation import PathObfuscator
from codeindex.client.state import WorkspaceState
from codeindex.client.workspace import read_text
from codeindex.protocol import chunk_hash

DEFAULT_TOP_K = 10
MAX_TOP_K = 100  # the server's bound (docs/index.md)


@dataclass(frozen=True)
class SearchHit:
    """A result in the client's terms: a real path, 1-based inclusive lines, the code."""

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
    state_root: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> list[SearchHit]:
    """The `top_k` chunks of the synced `workspace` nearest to `query`, best first, only those
    under `path_prefix` (a workspace-relative or absolute path of a file or folder, whole
    segments) when given. Results that are stale on disk are dropped, so fewer than `top_k` may
    come back. Raises IndexClientError if the workspace was never synced."""
    if not 1 <= top_k <= MAX_TOP_K:
        raise IndexClientError(f"top_k must be within 1..{MAX_TOP_K}, not {top_k}")
    store = WorkspaceState(workspace, state_root)
    if not store.exists():
        raise IndexClientError(
            f"{store.workspace} has not been synced; run `flywheel index sync {workspace}` first"
        )
    state = store.load()
    obfuscator = store.obfuscator()
    prefix = _relative_prefix(store.workspace, path_prefix)
    obf_prefix = obfuscator.path(prefix) if prefix else None
    with IndexClient(url, api_key, state.workspace_id, transport=transport) as client:
        results = client.search(query, top_k, obf_prefix)
    real = _synced_paths(store, obfuscator)
    hits: list[SearchHit] = []
    files: dict[str, list[str] | None] = {}
    for result in results:
        try:
            obf, h = str(result["path"]), str(result["chunk"])
            start, end, score = int(result["start"]), int(result["end"]), float(result["score"])
        except (KeyError, TypeError, ValueError):
            raise IndexClientError(f"the index server sent a malformed result: {result}") from None
        rel = real.get(obf)
        if rel is None:
            continue  # a file of an older sync, gone from the workspace
        if rel not in files:
            files[rel] = _lines(store.workspace / rel)
        lines = files[rel]
        if lines is None or end > len(lines):
            continue
        text = lines_text(lines, start, end)
        if chunk_hash(text) != h:
            continue  # changed on disk since the sync: the server's chunk is stale
        hits.append(SearchHit(rel, start, end, score, text))
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


def _synced_paths(store: WorkspaceState, obfuscator: PathObfuscator) -> dict[str, str]:
    # The files of the last sync, from the chunk cache (the walk that sync made).
    paths = ChunkCache.load_paths(store.cache_file)
    return obfuscator.path_map(paths)


def _lines(path: Path) -> list[str] | None:
    try:
        text = read_text(path)
    except OSError:
        return None
    return None if text is None else split_lines(text)
