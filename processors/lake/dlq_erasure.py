"""Erasure in the dead-letter topics: remove one user's dead letters, keep everyone else's.

Kafka cannot delete single records, only a partition's head (the DeleteRecords API). So for a
`dlq.<stage>` partition holding dead letters of the user, every *other* record up to the
partition's end is produced again at its end (key, value and headers unchanged, plus
`flywheel.copied-from-offset`), and then the records before the old end are deleted. Dead
letters produced meanwhile land after the old end and are kept. A crash between the copy and the
delete leaves both (the user's letters too): run the erasure again.

Which dead letters are the user's: the key is one of the user's session ids (telemetry, the
agent's completions and feedback, and `rewards` are keyed by session), or the body decodes (with
the original topic's schema, named by the `flywheel.topic` header) to an event of the user by the
lake's rule (`processors.lake.erasure.is_users_record`: its `user_id`, or, without one, a
session, suggestion or completion id of the user). A body that does not decode and a key that
is not the user's cannot be told apart from anyone else's; such letters stay until the topic's
retention (14 days).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from processors.lake.erasure import UserKeys, is_users_record
from processors.lake.errors import ErasureError
from streams.topics import DLQ_STAGES, TOPIC_VALUE_SCHEMAS, dlq_topic

COPIED_FROM = "flywheel.copied-from-offset"
DLQ_TOPICS = tuple(dlq_topic(stage) for stage in DLQ_STAGES)
Decode = Callable[[str, bytes], Mapping[str, Any]]  # (platform topic, bytes) -> record

Headers = list[tuple[str, bytes]]


def is_users_letter(key: bytes | None, value: bytes | None, headers: Headers, keys: UserKeys,
                    decode: Decode) -> bool:  # fmt: skip
    """True when a dead letter is the user's (module docstring)."""
    if key is not None and key.decode("utf-8", "replace") in keys.session_ids:
        return True
    topic = next((v.decode() for k, v in headers if k == "flywheel.topic"), None)
    if not value or topic is None or topic not in TOPIC_VALUE_SCHEMAS:
        return False
    try:
        record = decode(topic, value)
    except Exception:  # a dead letter is by definition often undecodable
        return False
    return is_users_record(record, keys)


def purge_dead_letters(
    kafka_config: Mapping[str, str],
    keys: UserKeys,
    decode: Decode,
    *,
    topics: Sequence[str] = DLQ_TOPICS,
    timeout_s: float = 30.0,
) -> dict[str, int]:
    """Remove the user's dead letters from `topics`; returns the number removed per topic.

    ErasureError naming the fix when a topic cannot be read, copied or truncated.
    """
    admin = AdminClient({**kafka_config, "log_level": 4})
    consumer = Consumer(
        {**kafka_config, "group.id": "_flywheel.privacy", "enable.auto.commit": False,
         "enable.partition.eof": True, "isolation.level": "read_committed"}
    )  # fmt: skip
    producer = Producer({**kafka_config, "enable.idempotence": True, "linger.ms": 20})
    removed: dict[str, int] = {}
    try:
        for topic in topics:
            removed[topic] = 0
            for tp in _partitions(consumer, topic, timeout_s):
                low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
                if high <= low:
                    continue
                mine = sum(
                    is_users_letter(m.key(), m.value(), _headers(m), keys, decode)
                    for m in _records(consumer, tp, low, high, timeout_s)
                )
                if mine:
                    _rewrite(consumer, producer, admin, tp, (low, high), keys, decode, timeout_s)
                    removed[topic] += mine
    finally:
        consumer.close()
    return removed


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[TopicPartition]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if metadata is None or metadata.error is not None:
        raise ErasureError(f"cannot read {topic}; create the platform topics (`flywheel topics`)")
    return [TopicPartition(topic, p) for p in sorted(metadata.partitions)]


def _records(
    consumer: Consumer, tp: TopicPartition, low: int, high: int, timeout_s: float
) -> Iterator[Message]:
    """The records of `tp` at offsets [low, high) (transaction markers take offsets too)."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, low)])
    while True:
        message = consumer.poll(timeout_s)
        if message is None:
            raise ErasureError(f"{tp.topic}[{tp.partition}] gave nothing in {timeout_s}s; retry")
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return
            raise ErasureError(f"reading {tp.topic}[{tp.partition}]: {error.str()}")
        if (message.offset() or 0) >= high:
            return
        yield message
        if (message.offset() or 0) >= high - 1:
            return


def _rewrite(
    consumer: Consumer,
    producer: Producer,
    admin: AdminClient,
    tp: TopicPartition,
    span: tuple[int, int],
    keys: UserKeys,
    decode: Decode,
    timeout_s: float,
) -> None:
    """Copy the others' letters of [low, high) to the end, then delete everything before high."""
    low, high = span
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(error.str())

    for m in _records(consumer, tp, low, high, timeout_s):
        headers = _headers(m)
        if is_users_letter(m.key(), m.value(), headers, keys, decode):
            continue
        copied: list[tuple[str, str | bytes | None]] = [
            *headers,
            (COPIED_FROM, str(m.offset()).encode()),
        ]
        producer.produce(
            tp.topic, m.value(), m.key(), partition=tp.partition, headers=copied,
            on_delivery=delivered,
        )  # fmt: skip
        producer.poll(0)
    if producer.flush(timeout_s) or failures:
        raise ErasureError(
            f"copying the other dead letters of {tp.topic}[{tp.partition}] failed "
            f"({failures[:1]}); nothing was deleted: fix the broker and run the erasure again"
        )
    futures = admin.delete_records([TopicPartition(tp.topic, tp.partition, high)])
    for future in futures.values():
        try:
            future.result(timeout_s)
        except Exception as exc:  # KafkaException: authorisation, timeouts
            raise ErasureError(
                f"deleting the records of {tp.topic}[{tp.partition}] before offset {high} "
                f"failed ({exc}); grant DELETE on the topic and run the erasure again"
            ) from exc


def _headers(message: Message) -> Headers:
    raw: list[tuple[str, Any]] = list(message.headers() or [])  # type: ignore[arg-type]
    return [(k, v if isinstance(v, bytes) else str(v or "").encode()) for k, v in raw]
