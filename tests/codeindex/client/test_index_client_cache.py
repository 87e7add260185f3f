"""The chunk cache: hits by (size, mtime), racy entries re-read, the root kept per key."""

from __future__ import annotations

import time
from pathlib import Path

from codeindex.client.cache import RACY_NS, CachedFile, ChunkCache
from codeindex.protocol import ChunkRef, chunk_hash

REF = ChunkRef(chunk_hash("x = 1\n"), 1, 1)
OLD_NS = time.time_ns() - 10 * RACY_NS


def test_entries_hit_by_size_and_mtime_and_survive_a_save(tmp_path: Path) -> None:
    path = tmp_path / "chunks.json"
    cache = ChunkCache(60, "key-a")
    cache.put("a.py", CachedFile.of(6, OLD_NS, [REF]))
    cache.put("bin.dat", CachedFile.of(9, OLD_NS, None))
    cache.save(path, "r" * 64)
    again = ChunkCache.load(path, 60, "key-a")
    hit = again.get("a.py", 6, OLD_NS)
    assert hit is not None and hit.refs() == (REF,)
    assert again.get("bin.dat", 9, OLD_NS) == CachedFile(9, OLD_NS, None)
    assert again.get("a.py", 7, OLD_NS) is None  # size changed
    assert again.get("a.py", 6, OLD_NS + 1) is None  # mtime changed
    assert again.root == "r" * 64
    assert ChunkCache.load(path, 60, "key-b").root is None  # made under another key
    assert ChunkCache.load(path, 40, "key-a").paths() == []  # other max_lines: all re-read
    assert ChunkCache.load_refs(path) == {"a.py": (REF,), "bin.dat": ()}
    assert ChunkCache.load_refs(tmp_path / "none.json") == {}


def test_an_entry_as_new_as_the_cache_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "chunks.json"
    cache = ChunkCache(60, "k")
    now = time.time_ns()
    cache.put("racy.py", CachedFile.of(6, now, [REF]))
    cache.save(path, "r" * 64)
    assert ChunkCache.load(path, 60, "k").get("racy.py", 6, now) is None


def test_a_change_drops_the_root_and_a_damaged_file_is_an_empty_cache(tmp_path: Path) -> None:
    cache = ChunkCache(60, "k", root="r" * 64)
    cache.retain([])
    assert cache.root == "r" * 64 and not cache.dirty  # nothing was there to forget
    cache.put("a.py", CachedFile.of(6, OLD_NS, [REF]))
    assert cache.root is None and cache.dirty
    (tmp_path / "bad.json").write_text("{not json")
    assert ChunkCache.load(tmp_path / "bad.json", 60, "k").paths() == []
