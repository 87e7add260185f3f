"""Syncing a workspace with the index server (docs/index.md, "The sync protocol").

1. Walk the workspace and cut each file into chunks (cached by size and mtime, so an unchanged
   file is not read); build the Merkle tree of obfuscated paths (not even that when no file
   changed: the cache keeps the root its files make).
2. Send the root; equal roots end the sync (one request, one hash).
3. Otherwise descend level by level, asking for the children of only the folders whose hashes
   differ (one request per level), and collect the files to send and the paths to delete.
4. Send those file entries; the server answers which of their chunks it has no embedding for.
5. Upload the text of only those chunks, read again from disk, in batches.
6. Send the root again: the server must now agree, or the sync failed.

A dry run does steps 1-3 (the root and children calls read and change nothing) and reports
what steps 4-5 would send.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from codeindex.client.api import IndexClient, IndexServerError
from codeindex.client.cache import CachedFile, ChunkCache
from codeindex.client.chunking import DEFAULT_MAX_LINES, chunk_file, lines_text, split_lines
from codeindex.client.errors import IndexClientError
from codeindex.client.lexical import TermCounts, refresh_terms, term_counts
from codeindex.client.obfuscation import PathObfuscator
from codeindex.client.state import WorkspaceState
from codeindex.client.workspace import (
    DEFAULT_MAX_FILE_SIZE,
    Walk,
    WorkspaceFile,
    read_text,
    walk_workspace,
)
from codeindex.protocol import ROOT, FileEntry, Tree, chunk_hash, diff_children

MAX_BATCH_CHUNKS = 256  # per `chunks` request (docs/index.md)
MAX_BATCH_BYTES = 4 << 20  # per `chunks` request body; a bigger single chunk goes alone
MAX_BATCH_FILES = 2000  # per `files` request: keeps one request's body to a few MiB

# progress(phase, done, total): phase "read" (files chunked) or "upload" (chunks sent).
Progress = Callable[[str, int, int], None]


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


class LocalIndex:
    """The workspace as the sync sees it: each file's chunk refs (from the cache or read
    now), and, built only when needed, its Merkle tree and the way back from obfuscated paths.
    """

    def __init__(
        self,
        files: list[tuple[str, CachedFile]],
        obfuscator: PathObfuscator,
        walk: Walk,
        files_read: int,
        gone: Iterable[str],
        cached_root: str | None,
    ) -> None:
        self._files = [(rel, entry) for rel, entry in files if entry.chunks]
        self._obfuscator = obfuscator
        self._gone = list(gone)
        self._cached_root = cached_root
        self.walk = walk
        self.files_read = files_read
        self.chunks = sum(len(entry.chunks or ()) for _, entry in self._files)

    @property
    def files(self) -> int:
        return len(self._files)

    @property
    def root(self) -> str:
        """The tree's root hash; with every file unchanged since the last walk, the cached
        one (the tree is then never built)."""
        return self._cached_root or self.tree.root

    @functools.cached_property
    def tree(self) -> Tree:
        tree = Tree()
        for rel, entry in self._files:
            tree.upsert(FileEntry.of(self._obfuscator.path(rel), entry.refs()))
        return tree

    @functools.cached_property
    def real(self) -> dict[str, str]:
        """Obfuscated path -> workspace-relative path: files, their folders, and the files of
        the last walk that are gone (so a dry run can name what it would delete)."""
        real = self._obfuscator.path_map([rel for rel, _ in self._files] + self._gone)
        for path, rel in list(real.items()):
            while "/" in path:
                path, rel = path.rsplit("/", 1)[0], rel.rsplit("/", 1)[0]
                real[path] = rel
        return real


def build_local_index(
    workspace: Path,
    store: WorkspaceState,
    *,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    max_lines: int = DEFAULT_MAX_LINES,
    progress: Progress = _no_progress,
) -> LocalIndex:
    """Walk `workspace` and cut the files whose size or mtime changed since the chunk cache
    saw them (the others are not read); update the cache and the lexical index (the chunks'
    term counts, `codeindex.client.lexical`) in `store`."""
    walk = walk_workspace(workspace, max_file_size, skip=[store.dir.parent])
    obfuscator = store.obfuscator()
    cache = ChunkCache.load(store.cache_file, max_lines, obfuscator.key_id)
    files: list[tuple[str, CachedFile]] = []
    fresh: dict[str, TermCounts] = {}  # the term counts of the chunks cut now
    files_read = 0
    total = len(walk.files)
    for done, file in enumerate(walk.files, 1):
        entry = cache.get(file.rel, file.size, file.mtime_ns)
        if entry is None:
            entry = _cut(workspace / file.rel, file, max_lines, fresh)
            cache.put(file.rel, entry)
            files_read += 1
        if entry.chunks is None:
            walk.skipped["not UTF-8 text"] += 1
        elif not entry.chunks:
            walk.skipped["blank"] += 1
        files.append((file.rel, entry))
        progress("read", done, total)
    gone = set(cache.paths()).difference(f.rel for f in walk.files)
    cache.retain(f.rel for f in walk.files)
    local = LocalIndex(files, obfuscator, walk, files_read, gone, cache.root)
    cache.save(store.cache_file, local.root)
    refresh_terms(store.terms_file, local.root, workspace, files, fresh)
    return local


def _cut(
    path: Path, file: WorkspaceFile, max_lines: int, terms: dict[str, TermCounts]
) -> CachedFile:
    """The file's cache entry; the term counts of its chunks go into `terms`."""
    try:
        text = read_text(path)
    except OSError:
        text = None  # gone or unreadable since the walk: skipped like a binary file
    if text is None:
        return CachedFile.of(file.size, file.mtime_ns, None)
    refs = []
    for chunk in chunk_file(file.rel, text, max_lines):
        ref = chunk.ref()
        if ref.hash not in terms:
            terms[ref.hash] = term_counts(chunk.text)
        refs.append(ref)
    return CachedFile.of(file.size, file.mtime_ns, refs)


@dataclass
class SyncReport:
    """What a sync did (or, in a dry run, would send). `bytes_sent` counts request bodies."""

    workspace: str
    workspace_id: str
    root: str
    files: int  # files in the local tree
    chunks: int  # chunk refs in the local tree
    files_read: int  # files read and cut this time (the others came from the cache)
    skipped: dict[str, int]
    requests: int = 0
    bytes_sent: int = 0
    files_sent: int = 0  # file entries upserted (dry run: that would be)
    deletes: int = 0
    chunks_uploaded: int = 0
    seconds: float = 0.0
    in_sync: bool = False
    dry_run: bool = False
    # A dry run's plan, in real paths (a deleted path the client no longer knows: obfuscated).
    would_send: list[str] = field(default_factory=list)
    would_delete: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def sync(
    workspace: Path,
    url: str,
    api_key: str | None,
    *,
    dry_run: bool = False,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    max_lines: int = DEFAULT_MAX_LINES,
    progress: Progress = _no_progress,
    state_root: Path | None = None,
    transport: httpx.BaseTransport | None = None,
) -> SyncReport:
    """Sync `workspace` with the index server at `url` (docs/index.md), or with `dry_run` only
    find what differs. Raises IndexClientError when the server cannot be reached, refuses a
    call, or still differs after the sync."""
    started = time.perf_counter()
    if not workspace.is_dir():
        raise IndexClientError(f"{workspace} is not a folder: give the workspace to index")
    store = WorkspaceState(workspace, state_root)
    state = store.load()
    local = build_local_index(
        workspace, store, max_file_size=max_file_size, max_lines=max_lines, progress=progress
    )
    root = local.root
    report = SyncReport(
        workspace=str(store.workspace),
        workspace_id=state.workspace_id,
        root=root,
        files=local.files,
        chunks=local.chunks,
        files_read=local.files_read,
        skipped=dict(sorted(local.walk.skipped.items())),
        dry_run=dry_run,
    )
    with IndexClient(url, api_key, state.workspace_id, transport=transport) as client:
        answer = client.root(root)
        report.in_sync = answer["in_sync"]
        if not report.in_sync:
            upserts, deletes = descend(local.tree, client)
            report.files_sent, report.deletes = len(upserts), len(deletes)
            if dry_run:
                report.would_send = [local.real[e.path] for e in upserts]
                report.would_delete = [local.real.get(p, p) for p in deletes]
            else:
                missing = send_files(client, upserts, deletes)
                report.chunks_uploaded = upload_chunks(
                    client, workspace, local, upserts, missing, progress
                )
                answer = client.root(root)
                if not answer["in_sync"]:
                    raise IndexClientError(
                        f"after the sync the index server still differs from the workspace "
                        f"(root {root[:12]}): another client synced the same workspace "
                        "meanwhile, or the server dropped an update; run the sync again"
                    )
                report.in_sync = True
        report.requests, report.bytes_sent = client.requests, client.bytes_sent
    if not dry_run:
        state.server_url, state.root = url, root
        if isinstance(answer.get("embedder"), str):
            state.embedder = answer["embedder"]
        store.save(state)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def descend(tree: Tree, client: IndexClient) -> tuple[list[FileEntry], list[str]]:
    """Compare `tree` with the server's level by level, only below folders whose hashes
    differ: (the file entries to send, the paths to delete). A server that does not know the
    workspace (404) holds nothing: everything is sent."""
    send: set[str] = set()
    deletes: list[str] = []
    level = [ROOT]
    while level:
        try:
            theirs = client.children(level)
        except IndexServerError as exc:
            if exc.status != 404:
                raise
            theirs = {}
        below: list[str] = []
        for folder in level:
            mine = tree.children(folder) or {}
            into, changed, gone = diff_children(mine, theirs.get(folder, {}))
            below.extend(_join(folder, name) for name in into)
            send.update(_join(folder, name) for name in changed)
            deletes.extend(_join(folder, name) for name in gone)
        level = below
    return _files_under(tree, send), deletes


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _files_under(tree: Tree, paths: set[str]) -> list[FileEntry]:
    """The files at or under any of `paths`, in one pass over the tree (O(files x depth))."""
    out = []
    for path, entry in tree.files.items():
        ancestor = path
        while True:
            if ancestor in paths:
                out.append(entry)
                break
            if "/" not in ancestor:
                break
            ancestor = ancestor.rsplit("/", 1)[0]
    return sorted(out, key=lambda e: e.path)


def send_files(
    client: IndexClient, upserts: Sequence[FileEntry], deletes: Sequence[str]
) -> list[str]:
    """Send the file entries (in requests of at most MAX_BATCH_FILES) and the deletes: the
    chunk hashes the server lacks, each once."""
    missing: dict[str, None] = {}
    batches = [upserts[i : i + MAX_BATCH_FILES] for i in range(0, len(upserts), MAX_BATCH_FILES)]
    for i, batch in enumerate(batches or [[]]):
        for h in client.files(batch, deletes if i == 0 else []):
            missing[h] = None
    return list(missing)


def upload_chunks(
    client: IndexClient,
    workspace: Path,
    local: LocalIndex,
    upserts: Sequence[FileEntry],
    missing: Sequence[str],
    progress: Progress = _no_progress,
) -> int:
    """Read the text of the `missing` chunks from disk and upload it in batches of at most
    MAX_BATCH_CHUNKS chunks and MAX_BATCH_BYTES bytes. Raises IndexClientError when a file
    changed since it was cut (its chunk no longer has the hash sent)."""
    wanted = set(missing)
    uploaded = 0
    batch: list[tuple[str, str]] = []
    batch_bytes = 0
    for h, text in _chunk_texts(workspace, local, upserts, wanted):
        size = len(IndexClient.encode({"hash": h, "text": text})) + 1
        if batch and (len(batch) >= MAX_BATCH_CHUNKS or batch_bytes + size > MAX_BATCH_BYTES):
            client.chunks(batch)
            uploaded += len(batch)
            progress("upload", uploaded, len(wanted))
            batch, batch_bytes = [], 0
        batch.append((h, text))
        batch_bytes += size
    if batch:
        client.chunks(batch)
        uploaded += len(batch)
        progress("upload", uploaded, len(wanted))
    return uploaded


def _chunk_texts(
    workspace: Path, local: LocalIndex, upserts: Iterable[FileEntry], wanted: set[str]
) -> Iterator[tuple[str, str]]:
    """(hash, text) of each wanted chunk once, reading each file that holds one once."""
    left = set(wanted)
    for entry in upserts:
        refs = [c for c in entry.chunks if c.hash in left]
        if not refs:
            continue
        rel = local.real[entry.path]
        try:
            text = read_text(workspace / rel)
        except OSError:
            text = None
        lines = split_lines(text or "")
        for ref in refs:
            if ref.hash not in left:
                continue  # the same chunk twice in one file
            chunk = lines_text(lines, ref.start, ref.end)
            if chunk_hash(chunk) != ref.hash:
                raise IndexClientError(f"{rel} changed during the sync; run the sync again")
            left.discard(ref.hash)
            yield ref.hash, chunk
    if left:
        raise IndexClientError(
            f"the index server asked for {len(left)} chunk(s) this sync did not send: is "
            "another client syncing the same workspace? run the sync again"
        )
