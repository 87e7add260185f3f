"""`ground.store.Store` on local disk: keys, listing, atomic writes, deletes. The same calls
against the local stack's object store run in the lake's crash test and the store analytics
test (integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ground.store import Store


def test_keys_map_to_paths_below_the_root_and_back(tmp_path: Path) -> None:
    store = Store.at(tmp_path)
    assert store.is_local and store.local_dir == tmp_path
    path = store.path("t/dt=2026-01-01/hour=00/x.parquet")
    assert path == f"{tmp_path}/t/dt=2026-01-01/hour=00/x.parquet"
    assert store.key(path) == "t/dt=2026-01-01/hour=00/x.parquet"
    with pytest.raises(Exception, match="is not below"):
        store.key("/elsewhere/x")


def test_a_write_appears_whole_and_lists_with_its_size(tmp_path: Path) -> None:
    store = Store.at(f"file://{tmp_path}")
    assert store.files() == []  # a missing prefix is empty, not an error
    size = store.write_atomically("a/b/c.bin", lambda out: out.write(b"12345"))
    assert size == 5 and store.read_bytes("a/b/c.bin") == b"12345"
    assert [(f.key, f.size, f.name) for f in store.files("a")] == [("a/b/c.bin", 5, "c.bin")]
    assert store.files("nothing/here") == []


def test_a_failed_write_leaves_nothing_visible_and_no_temp_file(tmp_path: Path) -> None:
    store = Store.at(tmp_path)
    store.write_atomically("x.bin", lambda out: out.write(b"old"))

    def half_then_fail(out: object) -> None:
        out.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.write_atomically("x.bin", half_then_fail)
    assert store.read_bytes("x.bin") == b"old"
    assert [f.key for f in store.files()] == ["x.bin"]


def test_delete_says_whether_there_was_something_to_delete(tmp_path: Path) -> None:
    store = Store.at(tmp_path)
    store.write_atomically("k", lambda out: out.write(b"v"))
    assert store.delete("k") is True
    assert store.delete("k") is False
    assert store.files() == []
