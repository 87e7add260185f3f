"""The client's lexical index: each chunk's term counts (`codeindex.terms.code_terms`) and BM25
over the workspace's chunks, for the hybrid search (docs/index.md, "Search").

Code-derived data at rest on the client only: `terms.jsonl` in the client's state folder,
keyed by chunk hash and pruned to the chunks of the last walk; never sent (the server keeps no
term statistics: they would be code at rest there). The sync keeps it in step with the chunk
cache: the terms of the chunks it cuts are counted then, and a chunk with no counts (an older
state folder) is read again from disk once.

BM25 is bm25s's default ("lucene": k1 1.5, b 0.75, idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
term part ``tf / (tf + k1 (1 - b + b dl / avgdl))``, a query term counted as often as it
occurs), so its scores equal the benchmark's reference BM25 (a unit test compares them).
Stdlib only, like the rest of the client.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from codeindex.client.cache import CachedFile
from codeindex.client.chunking import lines_text, split_lines
from codeindex.client.workspace import read_text
from codeindex.protocol import chunk_hash
from codeindex.terms import code_terms
from ground.durable import write_durably

K1 = 1.5
B = 0.75
# Bump when `code_terms` or the layout changes: a store of another format is rebuilt.
TERMS_FORMAT = "1"

TermCounts = dict[str, int]


def term_counts(text: str) -> TermCounts:
    """How often each term of `code_terms(text)` occurs in it."""
    return dict(Counter(code_terms(text)))


class LexicalIndex:
    """Chunk hash -> term counts, and BM25 over those chunks (one document per distinct chunk,
    wherever and however often it occurs)."""

    def __init__(self, chunks: dict[str, TermCounts] | None = None) -> None:
        self.chunks = chunks if chunks is not None else {}

    def __len__(self) -> int:
        return len(self.chunks)

    # BM25 ------------------------------------------------------------------------------------

    def scores(
        self, query: str | Sequence[str], among: Iterable[str] | None = None
    ) -> dict[str, float]:
        """The BM25 score of each chunk (of `among`, when given) that shares a term with
        `query` (text, or its terms); chunks scoring 0 are left out. The statistics (df, the
        average length) are the whole index's whatever `among` is."""
        terms = Counter(code_terms(query) if isinstance(query, str) else query)
        postings: dict[str, list[tuple[str, int]]] = {t: [] for t in terms}
        lengths = 0
        for chunk, counts in self.chunks.items():
            lengths += sum(counts.values())
            for term in terms:
                tf = counts.get(term)
                if tf:
                    postings[term].append((chunk, tf))
        n = len(self.chunks)
        if not n or not lengths:
            return {}
        average = lengths / n
        wanted = None if among is None else set(among)
        out: dict[str, float] = {}
        for term, times in terms.items():
            found = postings[term]
            if not found:
                continue
            idf = math.log(1.0 + (n - len(found) + 0.5) / (len(found) + 0.5))
            for chunk, tf in found:
                if wanted is not None and chunk not in wanted:
                    continue
                length = sum(self.chunks[chunk].values())
                part = tf / (tf + K1 * (1.0 - B + B * length / average))
                out[chunk] = out.get(chunk, 0.0) + times * idf * part
        return out

    # Storage ---------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> LexicalIndex:
        """The index stored at `path`; an empty one if there is none, it is damaged or of
        another format."""
        try:
            with path.open(encoding="utf-8") as f:
                header = json.loads(f.readline())
                if header.get("format") != TERMS_FORMAT:
                    return cls()
                chunks = json.loads(f.readline())
            if not isinstance(chunks, dict):
                return cls()
            return cls(chunks)
        except (OSError, ValueError, AttributeError):
            return cls()

    @staticmethod
    def stored_root(path: Path) -> str | None:
        """The root hash of the chunks the store at `path` holds (its first line only), or None
        when there is none, it is of another format, or it is incomplete."""
        try:
            with path.open(encoding="utf-8") as f:
                header = json.loads(f.readline())
        except (OSError, ValueError):
            return None
        if not isinstance(header, dict) or header.get("format") != TERMS_FORMAT:
            return None
        root = header.get("root")
        return root if isinstance(root, str) else None

    def save(self, path: Path, root: str | None) -> None:
        """Write atomically: a header line (format, the root hash these chunks make, or None
        when some chunk is missing) and the chunks' term counts."""
        header = {"format": TERMS_FORMAT, "root": root, "chunks": len(self.chunks)}
        body = json.dumps(header) + "\n" + json.dumps(self.chunks, separators=(",", ":")) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_durably(path, body.encode("utf-8"))


def refresh_terms(
    path: Path,
    root: str,
    workspace: Path,
    files: Sequence[tuple[str, CachedFile]],
    fresh: Mapping[str, TermCounts],
) -> None:
    """Bring the store at `path` in step with the walk's `files` (whose tree root is `root`):
    add the `fresh` counts of the chunks cut now, drop chunks no file holds, and count the
    terms of any chunk still missing by reading its file again. When the store already holds
    exactly this tree's chunks (its root is `root`), nothing is read or written."""
    if LexicalIndex.stored_root(path) == root:
        return
    index = LexicalIndex.load(path)
    chunks = index.chunks
    current = {c[0] for _, entry in files for c in entry.chunks or ()}
    for chunk in [c for c in chunks if c not in current]:
        del chunks[chunk]
    chunks.update((c, counts) for c, counts in fresh.items() if c in current)
    complete = _count_missing(chunks, workspace, files)
    index.save(path, root if complete else None)


def _count_missing(
    chunks: dict[str, TermCounts], workspace: Path, files: Sequence[tuple[str, CachedFile]]
) -> bool:
    """Count the terms of the chunks of `files` that `chunks` lacks, reading each such file
    once; False when one could not be read as cut (changed since the walk: the next sync
    retries)."""
    complete = True
    for rel, entry in files:
        refs = [c for c in entry.chunks or () if c[0] not in chunks]
        if not refs:
            continue
        try:
            text = read_text(workspace / rel)
        except OSError:
            text = None
        lines = split_lines(text or "")
        for h, start, end in refs:
            chunk = lines_text(lines, start, end)
            if chunk_hash(chunk) == h:
                chunks[h] = term_counts(chunk)
            else:
                complete = False
    return complete
