"""Lake maintenance in the local stack's object store: the maintenance lease (conditional PUTs on
S3Proxy), and erasure and retention reaching the store's objects as they reach files on disk."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import analytics
from contracts.lake_layout import range_problems, scan_topic
from ground.lease import LeaseError, StoreLease
from ground.store import Store
from processors.lake.compaction import compact_lake
from processors.lake.erasure import USER_TOPICS, erase_user, retain, user_keys
from processors.lake.errors import MaintenanceLockError
from processors.lake.maintenance import LOCK_NAME, maintenance_lock, still_held
from streams.topics import REWARDS_TOPIC
from tests.analytics.lake_builder import write_lake
from tests.processors.lake.test_lake_compaction import _events as compaction_events
from tests.processors.lake.test_lake_erasure import T0, VICTIM, _events

pytestmark = pytest.mark.integration


@pytest.fixture
def store(stack_store: Callable[[str], Store]) -> Store:
    return stack_store("lake")


def _record(owner: str, expires_at: float) -> bytes:
    return json.dumps({"owner": owner, "expires_at": expires_at}).encode()


def test_one_holder_at_a_time_and_a_dead_holders_lease_is_taken_over(store: Store) -> None:
    first = StoreLease(store, LOCK_NAME, ttl_s=30)
    first.acquire(wait_s=1)
    with pytest.raises(LeaseError, match="held by"):
        StoreLease(store, LOCK_NAME).acquire(wait_s=1)
    first.release()
    second = StoreLease(store, LOCK_NAME)
    second.acquire(wait_s=1)  # released: free again
    second.release()
    # A holder that died: its lease expired; the next one takes it over.
    store.write_bytes(
        LOCK_NAME, json.dumps({"owner": "dead", "expires_at": time.time() - 1}).encode()
    )
    third = StoreLease(store, LOCK_NAME)
    third.acquire(wait_s=1)
    third.check()
    third.release()
    assert store.files() == []  # released: no lease object left


def test_a_holder_whose_lease_was_taken_over_stops_before_writing(store: Store) -> None:
    stalled = StoreLease(store, LOCK_NAME, ttl_s=0.6)  # renews every 0.2 s
    stalled.acquire(wait_s=1)
    # Another process took it over (as after a stall past the time to live).
    store.write_bytes(
        LOCK_NAME, json.dumps({"owner": "other", "expires_at": time.time() + 60}).encode()
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            stalled.check()
        except LeaseError:
            break
        time.sleep(0.1)
    with pytest.raises(LeaseError, match="taken over"):
        stalled.check()
    stalled.release()  # not its lease any more: left in place
    assert json.loads(store.read_bytes(LOCK_NAME))["owner"] == "other"


def test_the_maintenance_lock_on_a_store_excludes_other_threads(store: Store) -> None:
    held, waited = threading.Event(), []

    def other() -> None:
        held.wait()
        try:
            with maintenance_lock(store, wait_s=0.5):
                waited.append("got it")
        except MaintenanceLockError:
            waited.append("refused")

    thread = threading.Thread(target=other)
    thread.start()
    with maintenance_lock(store), maintenance_lock(store):  # re-entrant within a thread
        held.set()
        thread.join()
        still_held(store)
    assert waited == ["refused"]
    with maintenance_lock(store, wait_s=1):
        pass  # released


def test_erasure_and_retention_reach_the_objects_as_the_files_on_disk(
    store: Store, tmp_path: Path
) -> None:
    disk = tmp_path / "lake"
    events = _events()
    write_lake(disk, events, partitions=2, rows_per_file=3)
    write_lake(store, events, partitions=2, rows_per_file=3)
    assert user_keys(store, VICTIM) == user_keys(disk, VICTIM)

    on_store = erase_user(store, VICTIM)
    on_disk = erase_user(disk, VICTIM)
    assert on_store.rows_removed == on_disk.rows_removed and sum(on_store.rows_removed.values())
    assert sorted(store.key(p) for p in on_store.files_rewritten) == sorted(
        Store.at(disk).key(p) for p in on_disk.files_rewritten
    )
    for topic in USER_TOPICS:
        for files in scan_topic(store, topic).files.values():
            for f in files:
                remote = pq.read_table(f.path, filesystem=store.fs)
                assert remote.equals(pq.read_table(disk / store.key(f.path))), f.path
                assert VICTIM not in repr(remote.to_pylist())
    assert sum(erase_user(store, VICTIM).rows_removed.values()) == 0  # idempotent

    now = T0 + timedelta(days=1, hours=2, minutes=30)
    kept = retain(store, days=1, now=now)
    local = retain(disk, days=1, now=now)
    relative = Store.at(disk)
    assert sorted(store.key(str(p)) for p in kept.deleted) == sorted(
        relative.key(str(p)) for p in local.deleted
    )
    assert kept.deleted and all(not store.files(store.key(str(p))) for p in kept.deleted)
    for files in scan_topic(store, "rewards").files.values():
        assert files  # every partition still has a file to resume from


def test_compaction_merges_the_objects_as_the_files_on_disk(store: Store, tmp_path: Path) -> None:
    disk = tmp_path / "lake"
    events = compaction_events()
    write_lake(disk, events, partitions=2, rows_per_file=2)
    write_lake(store, events, partitions=2, rows_per_file=2)
    later = datetime(2026, 3, 5, tzinfo=UTC)
    remote = compact_lake(store, [REWARDS_TOPIC], now=later)
    local = compact_lake(disk, [REWARDS_TOPIC], now=later)
    assert remote.topics[REWARDS_TOPIC].runs == local.topics[REWARDS_TOPIC].runs > 0
    names = sorted(f.key for f in store.files(REWARDS_TOPIC))
    assert names == sorted(f.key for f in Store.at(disk).files(REWARDS_TOPIC))
    for files in scan_topic(store, REWARDS_TOPIC).files.values():
        assert range_problems(files, start=0) == []
    with analytics.connect(store) as a, analytics.connect(disk) as b:
        query = "select reward_id, reward from rewards order by reward_id"
        assert a.execute(query).fetchall() == b.execute(query).fetchall()
