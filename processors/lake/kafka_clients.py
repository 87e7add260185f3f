"""The sink's Kafka clients: the consumer's configuration and the dead-letter producer."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, Message, Producer

from contracts.dead_letters import DeadLetter
from contracts.lake_layout import hour_of_ms
from processors.lake.errors import DeadLetterError

QUEUE_KBYTES = 16 * 1024  # librdkafka's local queue: bounds the memory dead letters can hold
HEADER_ROOM_BYTES = 64 * 1024
PREFETCH_KBYTES = 16 * 1024  # librdkafka's prefetch queue: bounds the consumer's memory


def consumer_config(
    kafka_config: Mapping[str, str],
    group_id: str,
    *,
    instance_id: str | None,
    max_record_bytes: int,
) -> dict[str, str | int | bool]:
    """The sink's consumer: no auto-commit (offsets are committed after each file's rename),
    from the earliest offset when there is no file, end-of-partition events (for `--once`), a
    bounded prefetch queue, and static membership when `instance_id` is given."""
    config: dict[str, str | int | bool] = {
        **kafka_config,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "queued.max.messages.kbytes": PREFETCH_KBYTES,
        "fetch.max.bytes": max(PREFETCH_KBYTES * 1024, max_record_bytes * 2),
    }
    if instance_id:
        config["group.instance.id"] = instance_id
    return config


def message_hour(message: Message) -> int:
    """Hour to place a file with no rows by: the message's Kafka timestamp, else now."""
    kind, timestamp_ms = message.timestamp()
    if kind == TIMESTAMP_NOT_AVAILABLE or timestamp_ms < 0:
        timestamp_ms = int(time.time() * 1000)
    return hour_of_ms(timestamp_ms)


class DeadLetterProducer:
    """Sends dead letters to one topic. `send` blocks while the local queue is full, which
    pauses consumption (the sink is single-threaded) instead of growing memory."""

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        topic: str,
        *,
        max_record_bytes: int,
        queue_full_timeout_s: float = 60.0,
    ) -> None:
        self.topic = topic
        self._queue_full_timeout_s = queue_full_timeout_s
        self._producer = Producer(
            {
                **kafka_config,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "compression.type": "zstd",
                "queue.buffering.max.kbytes": QUEUE_KBYTES,
                # A dead letter carries a value of up to max_record_bytes plus its headers.
                "message.max.bytes": max(1_000_000, max_record_bytes + HEADER_ROOM_BYTES),
            }
        )
        self.pending = 0
        self.sent = 0
        self._failures: list[str] = []

    def send(self, letter: DeadLetter) -> None:
        """Queue `letter`; DeadLetterError if the queue stays full for the timeout."""
        deadline = time.monotonic() + self._queue_full_timeout_s
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    letter.value,
                    letter.key,
                    headers=[(k, v) for k, v in letter.headers],
                    on_delivery=self._delivered,
                )
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise DeadLetterError(
                        f"the dead-letter queue to {self.topic} stayed full for "
                        f"{self._queue_full_timeout_s:.0f}s; is the broker reachable?"
                    ) from None
                self._producer.poll(0.1)  # serves delivery reports, which frees the queue
        self.pending += 1
        self.sent += 1
        self._producer.poll(0)

    def poll(self) -> None:
        """Serve delivery reports without waiting."""
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Return once every dead letter sent so far is acknowledged by the broker.

        Raises DeadLetterError when one failed or the timeout passed: the offsets they cover
        must not become durable then.
        """
        if self.pending:
            self._producer.flush(timeout_s)
        if self._failures:
            raise DeadLetterError(
                f"{len(self._failures)} dead letter(s) to {self.topic} failed: "
                f"{self._failures[0]}; check that the topic exists and accepts records this large"
            )
        if self.pending:
            raise DeadLetterError(
                f"{self.pending} dead letter(s) to {self.topic} not acknowledged in {timeout_s}s"
            )

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        self.pending -= 1
        if error is not None:
            self._failures.append(str(error))
