"""The joiner's output records, handed to Kafka in the transaction of the source partition they
derive from.

Why not faust's `Topic.send_soon` / `Table.send_changelog`: those queue records in faust's
producer buffer, which a background task drains one record at a time. Under exactly_once,
faust's consumer commit (`Consumer._commit_offsets` -> `TransactionManager.commit`) sends the
offsets to each partition's transaction and commits it *without flushing that buffer* (only the
at_least_once branch calls `producer.flush()`), so records still queued at a commit go into the
next transaction. A SIGKILL before that one commits aborts them while their source offsets are
committed: Rewards and state writes are lost (tests/processors/joiner/test_joiner_crash.py; the
crash bench saw missing and changed Rewards). Besides, faust picks a record's transaction by its
*destination* partition and topic group, and `rewards` is not a source topic.

`Outbox` therefore collects a batch's records per source partition, in the order they were made,
and `send` appends them straight to that partition's transactional aiokafka producer, as one
record batch per destination partition
(transactional id `<app id>-<topic group>-<partition>`, the one faust commits that partition's
offsets with) while holding faust's lock for that transaction, so a commit falls between two
batches' records of a partition, never inside one. The four telemetry topics form one topic
group, so partition n of each is one transaction: their records go in under a single hold of the
lock (a commit between them once kept a batch's state write, which dropped an attributed
suggestion, and lost the Rewards queued under another topic of that partition). The batch's
source offsets are acked by faust only after the agent's loop body returns, so they are
committed with (or after) the records. Under at_least_once the records go to faust's plain
producer, which faust flushes before it commits offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiokafka.structs import TopicPartition

from processors.joiner.errors import JoinerError

Headers = Sequence[tuple[str, bytes]] | None
# (destination topic, partition or None to partition by key, key, value or None for a
# tombstone, headers)
OutRecord = tuple[str, int | None, bytes | None, bytes | None, Headers]


class Outbox:
    """Output records of the current batch, per source (topic, partition)."""

    def __init__(self, app: Any, *, exactly_once: bool) -> None:
        """`app`: the faust App (its producer, consumer group id and assignor are read at send
        time, after the worker started)."""
        self._app = app
        self._exactly_once = exactly_once
        self._pending: dict[tuple[str, int], list[OutRecord]] = {}
        self._failure: BaseException | None = None
        # One send at a time: an agent whose records another agent's send took must not
        # return (and let faust ack its source records) before they are appended.
        self._sending = asyncio.Lock()

    def add(
        self,
        source_topic: str,
        partition: int,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = None,
        *,
        to_partition: int | None = None,
    ) -> None:
        """Queue a record derived from a record of `source_topic`/`partition` (no I/O), for
        `topic`'s partition `to_partition` (None: by key, with the producer's partitioner)."""
        self._pending.setdefault((source_topic, partition), []).append(
            (topic, to_partition, key, value, headers)
        )

    def __len__(self) -> int:
        return sum(len(records) for records in self._pending.values())

    async def send(self) -> None:
        """Hand every queued record to Kafka, in order per source partition (see the module
        docstring for which transaction). Raises `JoinerError` when a partition has no open
        transaction (another worker fenced this one) or an earlier record failed to send:
        the worker must stop rather than commit offsets past records that were not written."""
        if self._failure is not None:
            raise JoinerError(
                f"a joiner output record failed to send ({self._failure!r}); the worker stops "
                "and a restarted one resumes from the last committed transaction"
            ) from self._failure
        # Shielded: a worker stopping (SIGTERM) cancels the agent, and a batch cut in the middle
        # would commit its first records without its state (replayed later: duplicates).
        await asyncio.shield(asyncio.ensure_future(self._send_pending()))

    async def _send_pending(self) -> None:
        async with self._sending:
            await self._send_locked()

    async def _send_locked(self) -> None:
        pending, self._pending = self._pending, {}
        if not self._exactly_once:
            producer = self._app.producer
            for records in pending.values():
                for topic, to, key, value, headers in records:
                    fut = await producer.send(topic, key, value, to, None, headers)
                    fut.add_done_callback(self._check)
            return
        # Source topics of one topic group share a partition's transaction: their records go
        # in under one hold of its lock, or a commit could fall between (say) the state write
        # that drops an attributed suggestion and the Rewards derived from an outcome.
        by_transaction: dict[str, tuple[str, int, list[OutRecord]]] = {}
        for (source_topic, partition), records in pending.items():
            tid = self._transactional_id(source_topic, partition)
            if tid in by_transaction:
                by_transaction[tid][2].extend(records)
            else:
                by_transaction[tid] = (source_topic, partition, records)
        for tid, (source_topic, partition, records) in by_transaction.items():
            await self._send_transactional(tid, source_topic, partition, records)

    async def commit_open(self, offsets: Mapping[Any, int]) -> None:
        """Send the queued records, then commit every open transaction of this worker now,
        each with the source offsets among `offsets` (faust TPs → the next offset to read) of
        its partitions. The caller reads `offsets` from the offset markers before it awaits
        anything: every record below them has its outputs queued by then (a batch is applied
        and queued without yielding), so they are in the transactions this commits.

        For a rebalance: faust neither commits nor aborts at a revocation, so a transaction
        stays open across it, and table recovery then replays the committed changelog over
        the state, undoing the open transaction's writes (offset markers included) on every
        partition this worker keeps. The records after the committed offsets were then applied
        a second time into the same transaction: a two-worker crash run committed 123 Rewards
        twice. Committed here, state, offsets and outputs agree before recovery runs. For the
        attribution tick (`app`): its Rewards come with no new source offset, and faust
        commits a transaction only with acked offsets, so they would stay invisible to
        read_committed readers. Raises (the worker must stop: its state is not what Kafka
        holds) when a transaction with offsets or records to commit is gone or fenced."""
        if not self._exactly_once:
            await self._send_pending()
            return
        producer = self._app.producer
        by_transaction: dict[str, dict[Any, int]] = {
            tid: {} for tid in producer._transaction_producers
        }
        for tp, offset in offsets.items():
            tid = self._transactional_id(tp.topic, tp.partition)
            # aiokafka takes its own TopicPartition only (faust's rebalance signals give TPs)
            by_transaction.setdefault(tid, {})[TopicPartition(tp.topic, tp.partition)] = offset
        async with self._sending:
            await self._send_locked()
            for tid, tid_offsets in sorted(by_transaction.items()):
                async with self._transaction(tid) as txn:
                    if txn is None:
                        if tid_offsets:
                            raise JoinerError(
                                f"the transaction {tid} is gone with offsets {tid_offsets} to "
                                "commit: another worker fenced this one; restart it"
                            )
                        continue
                    if not txn._txn_manager.is_in_transaction():
                        continue  # none open (its begin failed): nothing of it to commit
                    if tid_offsets:
                        await txn.send_offsets_to_transaction(tid_offsets, self._app.conf.id)
                    await txn.commit_transaction()
                    await txn.begin_transaction()

    @contextlib.asynccontextmanager
    async def _transaction(self, tid: str) -> AsyncIterator[Any]:
        """faust's transactional aiokafka producer for `tid`, held under faust's lock for it
        (its commit takes the same lock around send_offsets_to_transaction + commit); None when
        there is none (the partition was revoked, or another worker fenced this one). faust
        keeps both in private maps of its Producer."""
        producer = self._app.producer
        lock = producer._trn_locks.get(tid)
        if lock is None:
            yield None
            return
        async with lock:
            yield producer._transaction_producers.get(tid)

    def _transactional_id(self, source_topic: str, partition: int) -> str:
        """faust's transactional id for a source partition: `<app id>-<topic group>-<n>`."""
        group = self._app.assignor.group_for_topic(source_topic)
        return f"{self._app.conf.id}-{group}-{partition}"

    async def _send_transactional(
        self, tid: str, source_topic: str, partition: int, records: list[OutRecord]
    ) -> None:
        async with self._transaction(tid) as txn:
            if txn is None:
                raise JoinerError(
                    f"no Kafka transaction is open for {source_topic} partition {partition} "
                    f"(transactional id {tid}): the partition was revoked or another worker "
                    "fenced this one; restart the worker"
                )
            # One aiokafka record batch per destination partition, in the records' order: a
            # record's own `send` costs a future, a done callback and a wake-up each (the
            # joiner's events per CPU-second rose ~20% in bench.pipeline without them); a full
            # batch is submitted and another one started.
            batches: dict[tuple[str, int], Any] = {}
            # Keyed records' partitions, once per key and send: aiokafka's partitioner hashes
            # in pure Python (murmur2), and a batch's Rewards repeat their sessions' keys.
            keyed: dict[tuple[str, bytes | None], int] = {}
            for topic, to, key, value, headers in records:
                if to is None:
                    to = keyed.get((topic, key))
                    if to is None:
                        to = keyed[(topic, key)] = await _partition_of(txn, topic, key)
                dest = (topic, to)
                batch = batches.get(dest)
                if batch is None:
                    batch = batches[dest] = txn.create_batch()
                if not _append(batch, key, value, headers):
                    await self._submit(txn, batch, dest)
                    batch = batches[dest] = txn.create_batch()
                    if not _append(batch, key, value, headers):
                        raise JoinerError(f"a record for {topic} does not fit in a batch")
            for dest, batch in batches.items():
                await self._submit(txn, batch, dest)

    async def _submit(self, txn: Any, batch: Any, dest: tuple[str, int]) -> None:
        batch.close()
        fut = await txn.send_batch(batch, dest[0], partition=dest[1])
        fut.add_done_callback(self._check)

    def _check(self, fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and fut.exception() is not None and self._failure is None:
            self._failure = fut.exception()


def _append(batch: Any, key: bytes | None, value: bytes | None, headers: Headers) -> bool:
    """Add a record to an aiokafka `BatchBuilder`; False when the batch is full (the first
    record of a batch always goes in, whatever its size)."""
    added = batch.append(timestamp=None, key=key, value=value, headers=list(headers or ()))
    return added is not None


async def _partition_of(txn: Any, topic: str, key: bytes | None) -> int:
    """The partition aiokafka's `send` picks for `key`: its partitioner over the topic's
    partitions, once the metadata is there (which `send` waits for the same way)."""
    await txn.client._wait_on_metadata(topic)
    partition: int = txn._partition(topic, None, None, None, key, None)
    return partition
