"""The online feature processor: source topics → OnlineFeatureStore → ``features.updates``.

A thin confluent-kafka adapter around the pure :class:`OnlineAggregator` (STYLE 6):

* **State by replay.** The store lives in memory, so every processor assigns itself *all*
  partitions of its source topics from the beginning and rebuilds the state from what the
  topics still hold (``rewards`` keeps 30 days). It commits no offsets; several processors
  (one per serving replica) each hold the full state.
* **Updates, throttled.** Each record marks the (feature, entity) pairs it changed; every
  ``flush_every_s`` one ``FeatureUpdate`` per marked pair is produced with the value as of the
  watermark (the latest event time seen), keyed ``entity_type:entity_id:feature:window`` on the
  compacted topic. So an entity with 1,000 events a second costs one update per feature per
  flush, not 1,000. A windowed value that changes only because time passes (rows leaving the
  window) sends no update: readers needing exact values ask the store with an ``as_of``.
* **Dead letters.** A record that does not decode goes to ``dlq.features`` with the decoder's
  cause (``contracts.dead_letters`` format and privacy rule); processing goes on.
* **Erasure.** ``privacy.erasures`` is read to its end before the sources, then followed: an
  ``ErasureRecorded`` drops the user's series, publishes a tombstone for each of their keys on
  the compacted updates topic, and makes the replay skip the user's older events (which the
  source topics keep until their retention).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from contracts.dead_letters import CODE_TEXT_FIELD, Origin, dead_letter
from contracts.errors import RecordRejected
from feature_store.declarations import FeatureDeclaration
from feature_store.errors import FeatureStoreError
from feature_store.online import OnlineFeatureStore
from feature_store.semantics import from_epoch_ms, to_epoch_ms
from processors.lake.status import consumer_lag
from schemas.catalog import load_schema
from schemas.events import FeatureUpdate
from streams.errors import DecodeError
from streams.serde import Codec
from streams.topics import ERASURES_TOPIC, FEATURE_UPDATES_TOPIC, TOPIC_VALUE_SCHEMAS, dlq_topic

log = logging.getLogger("flywheel.features")

STAGE = "features"
BATCH = 1000


@dataclass
class ProcessorStatus:
    """Counters of a running processor (one snapshot per progress line)."""

    records: int = 0
    rows: int = 0
    updates: int = 0
    erasures: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    watermark_ms: int | None = None
    series: int = 0
    caught_up: bool = False
    elapsed_s: float = 0.0
    lag: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> messages behind

    def line(self) -> str:
        rate = self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0
        watermark = "-" if self.watermark_ms is None else from_epoch_ms(self.watermark_ms)
        return (
            f"features: {self.records:,} records ({rate:,.0f}/s), {self.rows:,} rows, "
            f"{self.updates:,} updates, {sum(self.dead_letters.values()):,} dead letters, "
            f"{self.series:,} series, watermark {watermark}, "
            f"{'caught up' if self.caught_up else 'catching up'}"
        )


def update_key(feature: FeatureDeclaration, entity_id: str) -> str:
    """``entity_type:entity_id:feature:window``, the compaction key of ``features.updates``."""
    return f"{feature.entity.name}:{entity_id}:{feature.name}:{feature.window}"


class FeatureProcessor:
    """Consumes source topics into ``store`` and produces FeatureUpdates and dead letters.

    ``topics`` maps each topic to read to the platform source topic whose schema and features
    it carries (default: the features' sources, each read as itself); tests map a fresh topic
    to ``rewards``. Not thread-safe itself: run it in one thread; the store may be read from
    others.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        codec: Codec,
        store: OnlineFeatureStore,
        *,
        topics: Mapping[str, str] | None = None,
        updates_topic: str = FEATURE_UPDATES_TOPIC,
        erasures_topic: str = ERASURES_TOPIC,
        dlq: str = dlq_topic(STAGE),
        producer_name: str = "feature_store.online/worker-0",
        flush_every_s: float = 1.0,
        evict_every_s: float = 10.0,
    ) -> None:
        self._topics = dict(topics or {s: s for s in store.features.sources()})
        unknown = {p for p in self._topics.values() if p not in store.features.sources()}
        if unknown:
            raise FeatureStoreError(
                f"no declared feature reads {', '.join(sorted(unknown))}; map topics to one of "
                f"{', '.join(store.features.sources())}"
            )
        self._codec = codec
        self.store = store
        self._updates_topic = updates_topic
        self._erasures_topic = erasures_topic
        self._dlq = dlq
        self._producer_name = producer_name
        self._flush_every_s = flush_every_s
        self._evict_every_s = evict_every_s
        self._code_text = {p: _carries_code_text(p) for p in self._topics.values()}
        self._consumer = Consumer(
            {
                **kafka_config,
                "group.id": f"flywheel.features.{uuid.uuid4().hex[:8]}",  # never committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            }
        )
        self._producer = Producer(
            {**kafka_config, "enable.idempotence": True, "linger.ms": 50,
             "compression.type": "zstd", "partitioner": "murmur2_random"}
        )  # fmt: skip
        self._eof: dict[tuple[str, int], bool] = {}
        self._dirty: set[tuple[FeatureDeclaration, str]] = set()
        self._failures: list[str] = []
        self._closed = False
        self.status = ProcessorStatus()
        self._started = self._flushed = self._evicted = time.monotonic()
        self._assign()

    @property
    def topics(self) -> dict[str, str]:
        """Topic read -> the declared source it is read as."""
        return dict(self._topics)

    def _assign(self) -> None:
        erasures = self._partitions(self._erasures_topic)
        self._eof = {(tp.topic, tp.partition): False for tp in erasures}
        self._consumer.assign(erasures)
        while not self.caught_up():  # every erased user known before any source record
            for message in self._consumer.consume(BATCH, 0.2):
                if self._seen(message):
                    self._on_erasure(message)
        positions = self._consumer.position(erasures)
        partitions = positions + [tp for t in self._topics for tp in self._partitions(t)]
        self._eof = {(tp.topic, tp.partition): False for tp in partitions}
        self._consumer.assign(partitions)

    def _partitions(self, topic: str) -> list[TopicPartition]:
        metadata = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise FeatureStoreError(
                f"topic {topic} does not exist; create the platform topics with "
                "`flywheel topics` (or `flywheel stack up`)"
            )
        return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions]

    def run(
        self,
        stop: Callable[[], bool],
        progress: Callable[[ProcessorStatus], None] | None = None,
        *,
        until_caught_up: bool = False,
        progress_every_s: float = 5.0,
    ) -> ProcessorStatus:
        """Process until ``stop()`` is true (or, with ``until_caught_up``, every partition has
        been read to its end), then flush updates and dead letters and close."""
        reported = time.monotonic()
        try:
            while not stop():
                self.poll_batch()
                if until_caught_up and self.caught_up():
                    break
                if progress is not None and time.monotonic() - reported >= progress_every_s:
                    progress(self.snapshot())
                    reported = time.monotonic()
        finally:
            self.close()
        status = self.snapshot()
        if progress is not None:
            progress(status)
        return status

    def poll_batch(self, timeout_s: float = 0.2) -> int:
        """Consume and aggregate up to one batch; flush updates / evict when due."""
        messages = self._consumer.consume(BATCH, timeout_s)
        by_source: dict[str, list[dict[str, Any]]] = {}
        for message in messages:
            if message.topic() == self._erasures_topic:
                if self._seen(message):
                    self._ingest(by_source)  # the user's records before the erasure go first
                    by_source = {}
                    self._on_erasure(message)
                continue
            record = self._decode(message)
            if record is not None:
                by_source.setdefault(self._topics[message.topic()], []).append(record)  # type: ignore[index]
        self._ingest(by_source)
        now = time.monotonic()
        if now - self._flushed >= self._flush_every_s:
            self.flush_updates()
        if now - self._evicted >= self._evict_every_s:
            self.store.evict()
            self._evicted = now
        if self.caught_up():
            self.status.caught_up = True  # sticky: readiness once the replay is done
        return len(messages)

    def _ingest(self, by_source: Mapping[str, list[dict[str, Any]]]) -> None:
        for source, records in by_source.items():
            self._dirty.update(self.store.ingest(source, records))
            self.status.records += len(records)

    def _seen(self, message: Message) -> bool:
        """Track end-of-partition; True for a message carrying a value."""
        error = message.error()
        topic: str = message.topic()  # type: ignore[assignment]
        partition: int = message.partition()  # type: ignore[assignment]
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._eof[(topic, partition)] = True
            elif error.fatal():
                raise FeatureStoreError(f"the consumer failed for good: {error.str()}")
            else:
                log.warning("consumer: %s", error.str())
            return False
        self._eof[(topic, partition)] = False
        return message.value() is not None  # a tombstone carries no event

    def _on_erasure(self, message: Message) -> None:
        """Forget the erased user and tombstone every update key of theirs."""
        record = self._decode_value(message, ERASURES_TOPIC)
        if record is None:
            return
        user_id = str(record["user_id"])
        dropped = self.store.erase_user(user_id, to_epoch_ms(record["event_time"]))
        for feature, entity in dropped:
            self._dirty.discard((feature, entity))
            self._produce(self._updates_topic, update_key(feature, entity).encode(), None, None)
        self.status.erasures += 1
        log.info("erased user %s: %d online series dropped", user_id, len(dropped))

    def _decode(self, message: Message) -> dict[str, Any] | None:
        if not self._seen(message):
            return None
        return self._decode_value(message, self._topics[message.topic()])  # type: ignore[index]

    def _decode_value(self, message: Message, platform: str) -> dict[str, Any] | None:
        """The decoded value, or None after sending it to the dead-letter topic."""
        topic: str = message.topic()  # type: ignore[assignment]
        partition: int = message.partition()  # type: ignore[assignment]
        value: bytes = message.value()  # type: ignore[assignment]
        try:
            return self._codec.decode(platform, value)
        except DecodeError as exc:
            origin = Origin(topic, partition, message.offset() or 0, message.key(), value)
            letter = dead_letter(
                RecordRejected(exc.cause, str(exc)),
                origin,
                stage=STAGE,
                carries_code_text=self._code_text.get(platform, False),
            )
            headers: list[tuple[str, str | bytes | None]] = [(k, v) for k, v in letter.headers]
            self._produce(self._dlq, letter.key, letter.value, headers)
            self.status.dead_letters[exc.cause] += 1
            return None

    def caught_up(self) -> bool:
        """True when every assigned partition has been read to its end since its last record."""
        return bool(self._eof) and all(self._eof.values())

    def flush_updates(self) -> int:
        """Produce one FeatureUpdate per (feature, entity) changed since the last flush."""
        dirty, self._dirty = self._dirty, set()
        self._flushed = time.monotonic()
        as_of = self.store.watermark_ms
        if not dirty or as_of is None:
            return 0
        now = datetime.now(UTC)
        for feature, entity in dirty:
            value = self.store.get(feature.entity.name, entity, [feature.qualified_name], as_of)
            got = value[feature.qualified_name]
            update = FeatureUpdate(
                event_time=now,
                producer=self._producer_name,
                entity_type=feature.entity.name,
                entity_id=entity,
                feature_name=feature.name,
                window=feature.window,
                value=got.value,
                as_of=from_epoch_ms(as_of),
                source_event_count=got.count,
            )
            data = self._codec.encode(FEATURE_UPDATES_TOPIC, update.to_record())
            self._produce(self._updates_topic, update_key(feature, entity).encode(), data, None)
        self.status.updates += len(dirty)
        return len(dirty)

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None,
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, key, headers=headers, on_delivery=self._delivered
                )
                break
            except BufferError:
                self._producer.poll(0.1)  # the local queue is full: serve delivery reports
        self._producer.poll(0)

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._failures.append(str(error))

    def snapshot(self) -> ProcessorStatus:
        self.status.rows = self.store.aggregator.rows
        self.status.watermark_ms = self.store.watermark_ms
        self.status.series = self.store.aggregator.series_count()
        self.status.elapsed_s = time.monotonic() - self._started
        if not self._closed:
            self.status.lag = self._lag()
        return ProcessorStatus(
            **vars(self.status)
            | {"dead_letters": Counter(self.status.dead_letters), "lag": dict(self.status.lag)}
        )

    def _lag(self) -> dict[str, int]:
        """Per partition, the messages after the consumer's position (cached watermarks, no
        broker call); partitions with an unknown position are left out."""
        positions = self._consumer.position([TopicPartition(t, p) for t, p in self._eof])
        return consumer_lag(
            self._consumer,
            {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None for tp in positions},
        )

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush updates and dead letters, close the consumer; FeatureStoreError if some failed.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush_updates()
            remaining = self._producer.flush(timeout_s)
        finally:
            self._consumer.close()
        if self._failures or remaining:
            raise FeatureStoreError(
                f"{len(self._failures)} update(s)/dead letter(s) failed and {remaining} were not "
                f"acknowledged in {timeout_s}s ({self._failures[:1]}); check that "
                f"{self._updates_topic} and {self._dlq} exist (`flywheel topics`)"
            )


def _carries_code_text(platform_topic: str) -> bool:
    """True when the topic's schema has a code-text field (the dead letters' privacy rule)."""
    fields = load_schema(TOPIC_VALUE_SCHEMAS[platform_topic])["fields"]
    return any(f["name"] == CODE_TEXT_FIELD for f in fields)
