"""Synchronous writes and bounded reads of a topic, for the small control-plane topics (the
model registry's, the fleet's acks, erasure requests).

:class:`EventProducer` is idempotent and flushes with checked delivery; :func:`read_to_end`
reads a topic from the beginning to the end offsets taken when the read starts, so a write
acknowledged before a read is seen by it. Both raise :class:`~streams.errors.TopicIOError`.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from streams.errors import TopicIOError


def default_producer_id(component: str) -> str:
    """``<component>/<host>``, the ``producer`` field of events this process emits."""
    return f"{component}/{socket.gethostname()}"


class EventProducer:
    """An idempotent producer (acks=all, murmur2 partitioner, DESIGN §3) with checked delivery."""

    def __init__(self, kafka_config: Mapping[str, str], *, timeout_s: float = 30.0) -> None:
        self._timeout_s = timeout_s
        self._producer = Producer(
            {
                **kafka_config,
                "enable.idempotence": True,
                "acks": "all",
                "partitioner": "murmur2_random",
                "linger.ms": 0,
            }
        )
        self._failures: list[str] = []
        self._pending = 0

    def send(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None:
        """Queue a record (``value`` None: a tombstone); :meth:`flush` confirms it."""
        self._pending += 1
        raw_key = key.encode() if isinstance(key, str) else key
        self._producer.produce(
            topic, value, raw_key, headers=list(headers or ()), on_delivery=self._delivered
        )
        self._producer.poll(0)

    def flush(self) -> None:
        """Return once every queued record is acknowledged; TopicIOError if one failed."""
        if self._pending:
            self._producer.flush(self._timeout_s)
        failures, self._failures = self._failures, []
        if failures:
            raise TopicIOError(
                f"{len(failures)} record(s) were refused: {failures[0]}; check that the "
                "topic exists (`flywheel topics create`), the broker is up and this client "
                "may write to it"
            )
        if self._pending:
            raise TopicIOError(
                f"{self._pending} record(s) not acknowledged within {self._timeout_s:.0f}s; "
                "is the broker up? (`flywheel stack status`)"
            )

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        self._pending -= 1
        if error is not None:
            self._failures.append(str(error))


KeyedValue = tuple[bytes | None, bytes | None]


def read_to_end(
    kafka_config: Mapping[str, str],
    topic: str,
    *,
    keep: Callable[[bytes | None], bool],
    timeout_s: float = 30.0,
) -> list[KeyedValue]:
    """Every (key, value) of ``topic`` whose key ``keep`` accepts, from the beginning to the
    end offsets at the time of the call, in offset order per partition.

    Raises TopicIOError when the topic does not exist or the read does not finish in time.
    """
    consumer = Consumer(
        {
            **kafka_config,
            "group.id": f"_flywheel.topic-reader.{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 4,
        }
    )
    try:
        ends = _assign_from_beginning(consumer, topic, timeout_s)
        records: list[KeyedValue] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TopicIOError(f"reading {topic} did not finish within {timeout_s:.0f}s")
            first = consumer.poll(0.2)
            batch = [first, *consumer.consume(500, timeout=0)] if first is not None else []
            for message in batch:
                partition = message.partition() or 0
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ends.pop(partition, None)
                        continue
                    raise TopicIOError(f"reading {topic} failed: {error}")
                offset = message.offset() or 0
                end = ends.get(partition)
                if end is None or offset >= end:
                    continue  # written after the read began
                if keep(message.key()):
                    records.append((message.key(), message.value()))
                if offset >= end - 1:
                    ends.pop(partition)
        return records
    finally:
        consumer.close()


# A partition of a topic created a moment ago has no leader yet for a short while: these errors
# pass once the controller has elected one, so watermark reads retry them until their deadline.
_LEADER_PENDING = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
     KafkaError.UNKNOWN_TOPIC_OR_PART}
)  # fmt: skip


def watermarks(
    consumer: Consumer, partition: TopicPartition, timeout_s: float, *, cached: bool = False
) -> tuple[int, int]:
    """(low, high) offsets of ``partition``, waiting up to ``timeout_s`` for a leader to be
    elected (a new topic's partition); other errors raise at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                partition, timeout=max(0.1, deadline - time.monotonic()), cached=cached
            )
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and error.code() in _LEADER_PENDING
            if not retriable or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _assign_from_beginning(consumer: Consumer, topic: str, timeout_s: float) -> dict[int, int]:
    """Assign every non-empty partition of ``topic`` from its low watermark; partition → end."""
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:  # no broker answered within the timeout
        raise TopicIOError(
            f"cannot read topic {topic}: {exc.args[0] if exc.args else exc}; is the broker up? "
            "(`flywheel stack up`, or check FLYWHEEL_BOOTSTRAP_SERVERS)"
        ) from exc
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise TopicIOError(
            f"topic {topic} does not exist; create the platform's topics with "
            "`flywheel topics create` (or `flywheel stack up`)"
        )
    ends: dict[int, int] = {}
    assignment: list[TopicPartition] = []
    for partition in sorted(metadata.partitions):
        low, high = watermarks(consumer, TopicPartition(topic, partition), timeout_s)
        if high > low:
            ends[partition] = high
            assignment.append(TopicPartition(topic, partition, low))
    if assignment:
        consumer.assign(assignment)
    return ends
