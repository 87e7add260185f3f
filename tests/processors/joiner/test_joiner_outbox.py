"""`Outbox` without a broker: which transaction gets which records, in which order, and that
faust's commit (which takes the same per-transaction lock) cannot fall inside a batch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from processors.joiner.errors import JoinerError
from processors.joiner.outbox import Outbox


class FakeBatch:
    """aiokafka's `BatchBuilder`, holding up to `size` records."""

    def __init__(self, size: int) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []
        self.size, self.closed = size, False

    def append(
        self, *, timestamp: None, key: bytes | None, value: bytes | None, headers: Any
    ) -> Any:
        if self.closed or len(self.records) >= self.size:
            return None
        self.records.append((key, value))
        return object()

    def close(self) -> None:
        self.closed = True


class FakeTransactionalProducer:
    """Records the record batches aiokafka's `send_batch` was given, record by record; the
    returned future resolves at once. Keys go to partition len(key) % 2."""

    def __init__(self, log: list[tuple[str, Any]], tid: str, batch_size: int = 100) -> None:
        self.log, self.tid, self.batch_size = log, tid, batch_size
        self.batches = 0

        async def wait_on_metadata(_topic: str) -> None:
            await asyncio.sleep(0)

        self.client = SimpleNamespace(_wait_on_metadata=wait_on_metadata)
        self._txn_manager = SimpleNamespace(is_in_transaction=lambda: True)

    async def send_offsets_to_transaction(self, offsets: dict[Any, int], _group: str) -> None:
        self.log.append((self.tid, ("OFFSETS", {(tp.topic, tp.partition): n
                                                for tp, n in offsets.items()})))  # fmt: skip

    async def commit_transaction(self) -> None:
        await asyncio.sleep(0)
        self.log.append((self.tid, "COMMIT"))

    async def begin_transaction(self) -> None:
        self.log.append((self.tid, "BEGIN"))

    def _partition(self, _topic: str, _p: None, _k: None, _v: None, key: bytes, _sv: None) -> int:
        return len(key) % 2

    def create_batch(self) -> FakeBatch:
        return FakeBatch(self.batch_size)

    async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int) -> Any:
        assert batch.closed
        await asyncio.sleep(0)  # yields, like aiokafka's send_batch may (a batch not drained)
        self.batches += 1
        for key, value in batch.records:
            self.log.append((self.tid, (topic, partition, key, value)))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def fake_app(log: list[tuple[str, Any]], partitions: range) -> Any:
    tids = [f"app-0-{p}" for p in partitions]
    producer = SimpleNamespace(
        _trn_locks={t: asyncio.Lock() for t in tids},
        _transaction_producers={t: FakeTransactionalProducer(log, t) for t in tids},
    )
    assignor = SimpleNamespace(group_for_topic=lambda _topic: 0)
    return SimpleNamespace(producer=producer, assignor=assignor, conf=SimpleNamespace(id="app"))


def test_outbox_sends_each_partitions_records_in_order_in_its_transaction() -> None:
    log: list[tuple[str, Any]] = []
    outbox = Outbox(fake_app(log, range(2)), exactly_once=True)
    outbox.add("t", 1, "rewards", b"k1", b"r1")
    outbox.add("t", 0, "rewards", b"k0", b"r0")
    outbox.add("t", 1, "changelog", b"s", b"state", to_partition=1)
    outbox.add("t", 1, "changelog", b"s", None, to_partition=1)  # a tombstone
    asyncio.run(outbox.send())
    assert [entry for entry in log if entry[0] == "app-0-1"] == [
        ("app-0-1", ("rewards", 0, b"k1", b"r1")),  # by key, with the producer's partitioner
        ("app-0-1", ("changelog", 1, b"s", b"state")),
        ("app-0-1", ("changelog", 1, b"s", None)),
    ]
    assert ("app-0-0", ("rewards", 0, b"k0", b"r0")) in log
    assert len(outbox) == 0


def test_records_go_in_one_batch_per_destination_in_order_and_full_batches_split() -> None:
    log: list[tuple[str, Any]] = []
    app = fake_app(log, range(1))
    producer = app.producer._transaction_producers["app-0-0"]
    producer.batch_size = 3
    outbox = Outbox(app, exactly_once=True)
    for i in range(7):  # keys of length 1 and 2 alternate between partitions 1 and 0
        outbox.add("t", 0, "rewards", b"k" * (1 + i % 2), str(i).encode())
    outbox.add("t", 0, "changelog", b"s", b"state", to_partition=0)
    asyncio.run(outbox.send())
    sent = [record for _, record in log]

    def values(dest: tuple[str, int]) -> list[bytes]:
        return [v for topic, p, _, v in sent if (topic, p) == dest]

    assert values(("rewards", 1)) == [b"0", b"2", b"4", b"6"]
    assert values(("rewards", 0)) == [b"1", b"3", b"5"]
    assert ("changelog", 0, b"s", b"state") in sent
    assert producer.batches == 4  # partition 1's four records took two batches


def test_a_commit_waits_for_the_whole_batch_of_its_partition() -> None:
    log: list[tuple[str, Any]] = []
    app = fake_app(log, range(1))

    async def commit() -> None:  # what faust's commit_transactions does per transaction
        async with app.producer._trn_locks["app-0-0"]:
            log.append(("app-0-0", "COMMIT"))

    async def run() -> None:
        outbox = Outbox(app, exactly_once=True)
        for i in range(5):
            outbox.add("t", 0, "rewards", b"k", str(i).encode())
        sending = asyncio.ensure_future(outbox.send())
        await asyncio.sleep(0)  # the send holds the lock and yields mid-batch
        await asyncio.gather(commit(), sending)

    asyncio.run(run())
    assert log[-1] == ("app-0-0", "COMMIT")  # after all five, never between them


def test_commit_open_sends_the_queued_records_before_it_commits_them_with_the_offsets() -> None:
    """The attribution tick's Rewards come with no new source offset: `commit_open` puts them
    (and an agent's batch queued but not sent yet) into the transaction it then commits with
    the applied offsets read before it was called."""
    log: list[tuple[str, Any]] = []
    outbox = Outbox(fake_app(log, range(2)), exactly_once=True)
    outbox.add("t", 0, "rewards", b"k", b"from-the-tick")
    outbox.add("t", 1, "changelog", b"s", b"state", to_partition=1)
    offsets = {TP("t", 0): 41}
    asyncio.run(outbox.commit_open(offsets))
    assert [entry for entry in log if entry[0] == "app-0-0"] == [
        ("app-0-0", ("rewards", 1, b"k", b"from-the-tick")),  # by key
        ("app-0-0", ("OFFSETS", {("t", 0): 41})),
        ("app-0-0", "COMMIT"),
        ("app-0-0", "BEGIN"),
    ]
    assert [entry for entry in log if entry[0] == "app-0-1"] == [
        ("app-0-1", ("changelog", 1, b"s", b"state")),
        ("app-0-1", "COMMIT"),
        ("app-0-1", "BEGIN"),
    ]
    assert len(outbox) == 0


def test_a_partition_without_a_transaction_stops_the_worker() -> None:
    log: list[tuple[str, Any]] = []
    outbox = Outbox(fake_app(log, range(1)), exactly_once=True)
    outbox.add("t", 3, "rewards", b"k", b"v")  # partition 3 was revoked (or never assigned)
    with pytest.raises(JoinerError, match="no Kafka transaction is open"):
        asyncio.run(outbox.send())
    assert log == []


def test_a_commit_never_splits_a_batch_across_the_topics_of_one_transaction() -> None:
    """The four telemetry topics share a topic group, so partition 0 of each is one transaction:
    a batch's Rewards derived from an outcome and the state write that drops the attributed
    suggestion (queued under the first topic) must be committed together, or a crash between
    two commits keeps the state change and loses the Rewards."""
    log: list[tuple[str, Any]] = []
    app = fake_app(log, range(1))

    async def committer() -> None:  # faust commits every partition's transaction often
        for _ in range(20):
            async with app.producer._trn_locks["app-0-0"]:
                log.append(("app-0-0", "COMMIT"))
            await asyncio.sleep(0)

    async def run() -> None:
        outbox = Outbox(app, exactly_once=True)
        outbox.add("telemetry.suggestions", 0, "rewards", b"k", b"r-from-offer")
        outbox.add("telemetry.outcomes", 0, "rewards", b"k", b"r-from-outcome")
        outbox.add("telemetry.suggestions", 0, "changelog", b"s", None, to_partition=0)
        await asyncio.gather(outbox.send(), committer())

    asyncio.run(run())
    sent = [i for i, entry in enumerate(log) if entry[1] != "COMMIT"]
    assert len(sent) == 3
    assert "COMMIT" not in [entry[1] for entry in log[sent[0] : sent[-1]]], log


def test_a_worker_keeps_only_the_table_entries_of_partitions_it_holds() -> None:
    """The joiner writes the table's data itself, so faust does not drop a revoked partition's
    keys: `retain` does, at every assignment, for both layouts of entries."""
    from processors.joiner.app import TableState  # imports faust

    data = {
        "s-a": '{"p":0,"k":"a","e":[]}',
        "s-b": '{"p":1,"k":"b","d":5}',
        "g-1": '{"p": 1, "done": true, "at": 3, "r": []}',
        "\x00off/telemetry.edits/1": 7,
        "\x00wm/telemetry.edits/0": 9,
        "\x00now/1": 4,
    }
    state = TableState(
        SimpleNamespace(data=data), Outbox(fake_app([], range(2)), exactly_once=True), "t"
    )
    assert state.retain({0}) == 4
    assert set(data) == {"s-a", "\x00wm/telemetry.edits/0"}


def test_changelog_records_are_the_bytes_faust_itself_writes() -> None:
    """`TableState` serializes with the table's codecs resolved once; faust's recovery must
    read them back as it reads its own writes (`Topic.prepare_key` / `prepare_value`)."""
    import faust

    from processors.joiner.app import changelog_codec

    app = faust.App("changelog-codec-test", broker="kafka://localhost:1")
    table = app.Table("joiner-state", default=None, partitions=4)
    topic, dump_key, dump_value = changelog_codec(table)
    assert topic == table.changelog_topic.get_topic_name()
    for key, value in [
        ("s-1", '{"p":0,"k":"s\\u00e9","e":[["telemetry.edits","AAE="]]}'),
        ("\x00wm/telemetry.edits/3", 1_736_154_000_549),
        ("g-é", {"p": 1, "done": True, "r": []}),
    ]:
        assert dump_key(key) == table.changelog_topic.prepare_key(key, table.key_serializer)[0]
        expected = table.changelog_topic.prepare_value(value, table.value_serializer)[0]
        assert dump_value(value) == expected
