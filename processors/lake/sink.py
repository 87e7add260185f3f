"""`LakeSink`: every platform topic into Parquet, exactly once (DESIGN §6).

Per message: decode and validate (`RecordDecoder`), or dead-letter it; buffer the row in its
partition's buffer (`BufferSet`); write each complete buffer as a file. Writing a file:

1. if the buffer covers dead letters, wait until the DLQ has acknowledged them;
2. write the file so that it appears whole or not at all (`ground.store`: on local disk a
   temporary file, fsync, rename, fsync of the directory; in an object store one upload);
3. commit offset `last + 1` for the partition (synchronously).

The files in the lake are the truth: on assignment a partition resumes from the largest `last` of
its files + 1 (from the beginning when there are none), so a crash anywhere replays exactly the
offsets no file covers, and each record lands in the lake once. Committed offsets only serve
lag monitoring. Dead letters are at least once: a crash before step 2 sends them again.

Memory is bounded by the buffers' byte budget and the Kafka clients' queues (`kafka_clients`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from contracts.dead_letters import Origin, dead_letter
from contracts.errors import RecordRejected
from contracts.lake_layout import SECONDS_PER_HOUR, file_key
from ground.store import Store
from processors.lake.buffers import (
    MEMORY_PER_WIRE_BYTE,
    ROW_OVERHEAD_BYTES,
    BufferSet,
    PartitionBuffer,
    RotationLimits,
)
from processors.lake.decoding import DEFAULT_MAX_RECORD_BYTES
from processors.lake.errors import LakeError
from processors.lake.kafka_clients import DeadLetterProducer, consumer_config, message_hour
from processors.lake.lake_topics import lake_topics
from processors.lake.resume import prepare_partitions
from processors.lake.status import SinkStatus, consumer_lag
from processors.lake.writer import write_parquet
from streams.serde import Decoder
from streams.topics import dlq_topic as dlq_topic_of

log = logging.getLogger(__name__)
DEFAULT_GROUP = "flywheel.lake-sink"
ASSIGNMENT_TIMEOUT_S = 60.0


class LakeSink:
    """Consumes `topics` with group `group_id` into `lake` (a store, or a local directory);
    see the module docstring."""

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        codec: Decoder,
        lake: Store | Path,
        topics: Iterable[str],
        *,
        group_id: str = DEFAULT_GROUP,
        limits: RotationLimits | None = None,
        dlq_topic: str = dlq_topic_of("sink"),
        stage: str = "sink",
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        decode_as: Mapping[str, str] | None = None,
        instance_id: str | None = None,
        batch_size: int = 2000,
    ) -> None:
        """`decode_as` maps non-platform topics to the platform topic whose schema they carry;
        `instance_id` turns on static membership (a restarted sink gets its partitions back at
        once instead of after the session timeout). SinkConfigError on a bad configuration."""
        self.lake = Store.at(lake)
        self._topics = lake_topics(
            topics, codec, decode_as=decode_as, max_record_bytes=max_record_bytes
        )
        self._stage = stage
        self._batch_size = batch_size
        self._buffers = BufferSet(limits or RotationLimits())
        self._dlq = DeadLetterProducer(kafka_config, dlq_topic, max_record_bytes=max_record_bytes)
        self._consumer = Consumer(
            consumer_config(
                kafka_config, group_id, instance_id=instance_id, max_record_bytes=max_record_bytes
            )
        )
        self._consumer.subscribe(
            list(self._topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._eof: dict[tuple[str, int], bool] = {}
        self._unread_check: set[tuple[str, int]] = set()  # first message after a resume
        self._closed = False
        self.status = SinkStatus()
        self._rows_at_report = 0
        self._started_at = self._reported_at = time.monotonic()

    # --- the loop ------------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event,
        progress: Callable[[SinkStatus], None] | None = None,
        *,
        until_caught_up: bool = False,
        progress_every_s: float = 1.0,
    ) -> SinkStatus:
        """Sink until `stop` is set (or, with `until_caught_up`, every assigned partition has
        been read to its end), then write every buffer, commit and close. `progress` gets a
        status snapshot every `progress_every_s`. On an error nothing more is written: the
        exception propagates and a restart replays what no file covers."""
        started = time.monotonic()
        try:
            while not stop.is_set():
                self.poll_batch()
                if until_caught_up and self._caught_up_since(started):
                    break
                if (
                    progress is not None
                    and time.monotonic() - self._reported_at >= progress_every_s
                ):
                    progress(self.snapshot())
            status = self.close()
        except BaseException:
            self.abort()
            raise
        if progress is not None:
            progress(status)
        return status

    def poll_batch(self, timeout_s: float = 0.5) -> int:
        """Consume up to one batch, buffer it, write what is due; returns messages handled."""
        messages = self._consumer.consume(self._batch_size, timeout_s)
        now = time.monotonic()
        for message in messages:
            error = message.error()
            if error is None:
                self._ingest(message, now)
            else:
                self._on_error(message, error)
        for buffer in self._buffers.due(time.monotonic()):
            self._write(buffer)
        self._dlq.poll()
        return len(messages)

    def caught_up(self) -> bool:
        """True when partitions are assigned and each was read to its end since its last message."""
        owned = self._buffers.owned()
        return bool(owned) and all(self._eof.get(tp, False) for tp in owned)

    def _caught_up_since(self, started: float) -> bool:
        if not self._buffers.owned() and time.monotonic() - started > ASSIGNMENT_TIMEOUT_S:
            raise LakeError(
                f"no partition of {', '.join(self._topics)} was assigned in "
                f"{ASSIGNMENT_TIMEOUT_S:.0f}s; do the topics exist (`flywheel topics`)?"
            )
        return self.caught_up()

    def _ingest(self, message: Message, now: float) -> None:
        # The hot path (~5 µs a record besides decoding): no helper calls that are not needed.
        # A message without an error always has its coordinates; the stubs allow None.
        topic: str = message.topic()  # type: ignore[assignment]
        partition: int = message.partition()  # type: ignore[assignment]
        offset: int = message.offset()  # type: ignore[assignment]
        tp = (topic, partition)
        if self._buffers.is_stale(tp, offset):
            self.status.stale += 1
            return
        self._eof[tp] = False
        if tp in self._unread_check:
            self._check_unread(tp, offset)
        self.status.records += 1
        value = message.value()
        lake_topic = self._topics[topic]
        if value is None:  # a tombstone of a compacted topic: no event, nothing to store
            self.status.tombstones += 1
            self._buffers.add_empty(tp, offset, message_hour(message), now, dead_letter=False)
            return
        try:
            record = lake_topic.decoder.decode(value)
        except RecordRejected as rejected:
            origin = Origin(topic, partition, offset, message.key(), value)
            letter = dead_letter(
                rejected, origin, stage=self._stage, carries_code_text=lake_topic.carries_code_text
            )
            self._dlq.send(letter)
            self.status.dead_letters[rejected.cause] += 1
            self._buffers.add_empty(tp, offset, message_hour(message), now, dead_letter=True)
            return
        hour = math.floor(record["event_time"].timestamp() / SECONDS_PER_HOUR)  # layout.hour_of
        size = len(value) * MEMORY_PER_WIRE_BYTE + ROW_OVERHEAD_BYTES  # buffers.estimated_bytes
        row = lake_topic.columns.row(record)
        for buffer in self._buffers.add_row(tp, offset, row, hour, size, now):
            self._write(buffer)

    def _check_unread(self, tp: tuple[str, int], offset: int) -> None:
        """Warn when the first offset read after resuming is past the resume offset: the range
        between is covered by the next file but was never read (retention deleted it, or
        compaction did on a compacted topic; on a transactionally written topic such as
        `rewards` it is usually aborted records and transaction markers, which a read_committed
        consumer never sees: nothing is missing then)."""
        self._unread_check.discard(tp)
        expected = self._buffers.position(tp)
        if expected is not None and offset > expected:
            log.warning(
                "%s/%s resumed at offset %s but the first record read is at %s: offsets in "
                "between are not in the lake (deleted by retention or compaction, or aborted "
                "transactions and their markers, which hold no committed records)",
                *tp,
                expected,
                offset,
            )

    def _on_error(self, message: Message, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            self._eof[(message.topic(), message.partition())] = True  # type: ignore[index]
        elif error.fatal() or error.code() == KafkaError._FATAL:
            # Fenced or otherwise dead: another member may own these partitions now, so write
            # nothing more (run() aborts); a restart resumes from the files.
            raise LakeError(
                f"the consumer failed for good: {error.str()}; if another sink uses the same "
                "--instance-id in this group, give each its own"
            )
        else:
            log.warning("consumer: %s", error.str())

    # --- files ---------------------------------------------------------------------------------

    def _write(self, buffer: PartitionBuffer) -> None:
        """Make `buffer` a durable, visible file, then commit past it."""
        if buffer.dead_letters:
            self._dlq.flush()  # the file will say these offsets are done: they must be in the DLQ
        lake_topic = self._topics[buffer.topic]
        table = lake_topic.columns.table(
            buffer.rows, buffer.topic, buffer.partition, buffer.offsets
        )
        key = file_key(
            buffer.topic,
            buffer.partition,
            buffer.first,
            buffer.last,
            buffer.file_hour,
        )
        self.status.bytes_written += write_parquet(self.lake, key, table)
        self.status.files += 1
        self.status.rows += len(buffer.rows)
        self._commit(buffer.topic, buffer.partition, buffer.last + 1)

    def _commit(self, topic: str, partition: int, offset: int) -> None:
        try:
            self._consumer.commit(
                offsets=[TopicPartition(topic, partition, offset)], asynchronous=False
            )
        except KafkaException as exc:
            # The lake, not the group, decides where a partition resumes; a failed commit only
            # leaves the reported lag behind until the next one succeeds.
            log.warning("commit of %s/%s at %s failed: %s", topic, partition, offset, exc)

    # --- rebalancing ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        resume = prepare_partitions(self.lake, [(p.topic, p.partition) for p in partitions])
        for p in partitions:
            tp = (p.topic, p.partition)
            start = resume[tp]
            p.offset = OFFSET_BEGINNING if start is None else start
            self._buffers.assign(tp, start)
            self._eof[tp] = False
            if start is not None:
                self._unread_check.add(tp)
            log.info("assigned %s/%s from offset %s", p.topic, p.partition, start)
        consumer.assign(partitions)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            buffer = self._buffers.release((p.topic, p.partition))
            self._eof.pop((p.topic, p.partition), None)
            if buffer is not None and not self._closed:
                self._write(buffer)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another member may own them already: writing now could overlap its files.
        for p in partitions:
            self._buffers.release((p.topic, p.partition))
            self._eof.pop((p.topic, p.partition), None)

    # --- status and shutdown -------------------------------------------------------------------

    def snapshot(self) -> SinkStatus:
        """The status now, with lag from the consumer's cached high watermarks."""
        now = time.monotonic()
        elapsed = max(now - self._reported_at, 1e-9)
        self.status.rows_per_s = (self.status.rows - self._rows_at_report) / elapsed
        self._rows_at_report, self._reported_at = self.status.rows, now
        owned = self._buffers.owned()
        lag = consumer_lag(self._consumer, {tp: self._buffers.position(tp) for tp in owned})
        self.status.lag = lag
        self.status.partitions = len(owned)
        return self.status.copy()

    def close(self) -> SinkStatus:
        """Write every buffer, commit, and close the clients. Idempotent."""
        if not self._closed:
            for buffer in self._buffers.drain():
                self._write(buffer)
            self._dlq.flush()
            self._closed = True
            self._consumer.close()
            # The final figure is the average over the whole run, not the last interval.
            self.status.rows_per_s = self.status.rows / max(
                time.monotonic() - self._started_at, 1e-9
            )
        return self.status.copy()

    def abort(self) -> None:
        """Close the clients without writing anything more (after an error)."""
        if not self._closed:
            self._closed = True
            self._consumer.close()
