"""A learner's mirror of the lake topics it reads (`learner.data.lake_mirror`), from a store on
local disk (the same keys as in S3; the learner integration test mirrors from the stack's S3)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from contracts.lake_layout import file_key, scan_topic
from ground.store import Store
from learner.data.lake_mirror import sync_mirror

HOUR = 490_000  # hours since the epoch (December 2025)


def _put(store: Store, topic: str, first: int, last: int, data: bytes) -> str:
    key = file_key(topic, 0, first, last, HOUR)
    store.write_bytes(key, data)
    return key


def test_the_mirror_holds_exactly_the_lake_files_of_its_topics(tmp_path: Path) -> None:
    store = Store.at(tmp_path / "lake")
    mirror = tmp_path / "mirror"
    a = _put(store, "rewards", 0, 9, b"a" * 100)
    b = _put(store, "rewards", 10, 19, b"b" * 100)
    _put(store, "telemetry.offered", 0, 9, b"c" * 100)  # a topic the learner does not read
    store.write_bytes(f"rewards/dt=x/hour=1/.{Path(a).name}.abc.tmp", b"partial")  # a writer's

    done = sync_mirror(store, mirror, ["rewards"])
    assert (done.fetched, done.bytes, done.removed) == (2, 200, 0)
    assert (mirror / a).read_bytes() == b"a" * 100 and (mirror / b).read_bytes() == b"b" * 100
    assert not (mirror / "telemetry.offered").exists()
    assert len(scan_topic(mirror, "rewards").files[0]) == 2  # read like a lake on disk
    assert sync_mirror(store, mirror, ["rewards"]).fetched == 0  # same size and time: kept

    # Compaction: a merged file replaces its inputs, which are deleted from the store.
    merged = _put(store, "rewards", 0, 19, b"m" * 150)
    store.delete(a)
    store.delete(b)
    # An erasure rewrites a file in place: another size.
    c = _put(store, "rewards", 20, 29, b"c" * 100)
    sync_mirror(store, mirror, ["rewards"])
    _put(store, "rewards", 20, 29, b"c" * 90)
    orphan = mirror / Path(c).parent / f".{Path(c).name}.dead.tmp"  # a fetch killed mid-write
    orphan.write_bytes(b"half")
    done = sync_mirror(store, mirror, ["rewards"])
    assert (done.fetched, done.removed) == (1, 0)
    assert (mirror / c).read_bytes() == b"c" * 90 and not orphan.exists()
    assert (mirror / merged).exists() and not (mirror / a).exists() and not (mirror / b).exists()


def test_a_rewrite_of_the_same_size_is_fetched_again_by_its_time(tmp_path: Path) -> None:
    store = Store.at(tmp_path / "lake")
    mirror = tmp_path / "mirror"
    key = _put(store, "rewards", 0, 9, b"before")
    sync_mirror(store, mirror, ["rewards"])
    _put(store, "rewards", 0, 9, b"after!")
    later = (tmp_path / "lake" / key).stat().st_mtime_ns + 1_000_000_000
    os.utime(tmp_path / "lake" / key, ns=(later, later))
    assert sync_mirror(store, mirror, ["rewards"]).fetched == 1
    assert (mirror / key).read_bytes() == b"after!"


def test_learners_on_one_machine_sync_one_mirror_at_the_same_time(tmp_path: Path) -> None:
    """The gate's and the agent's learners both mirror the Rewards into one directory."""
    store = Store.at(tmp_path / "lake")
    keys = [_put(store, "rewards", 10 * i, 10 * i + 9, bytes([i]) * 50_000) for i in range(60)]
    mirror = tmp_path / "mirror"
    errors: list[BaseException] = []

    def learner() -> None:
        try:
            sync_mirror(store, mirror, ["rewards"])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=learner) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all((mirror / key).read_bytes()[:1] == bytes([i]) for i, key in enumerate(keys))
