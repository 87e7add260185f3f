"""A raw confluent-kafka producer loop: the baseline and topic filler the benchmarks share."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer

Message = tuple[str, bytes, bytes]  # topic, key, value


def produce_all(
    config: Mapping[str, object],
    messages: Iterable[Message],
    timeout_s: float = 120,
    warmup: Iterable[Message] = (),
) -> float:
    """Produce (topic, key, value) messages as fast as the producer takes them; returns the
    seconds until every one is acknowledged. RuntimeError if some are not within `timeout_s`.

    `warmup` messages are produced and acknowledged before the clock starts: a fresh
    idempotent producer needs ~0.5 s to connect, fetch metadata and get its producer id, which
    would otherwise dominate a short run (send one message per topic the run writes to)."""
    producer = Producer(dict(config))
    _produce(producer, warmup)
    if producer.flush(timeout_s) != 0:
        raise RuntimeError("the producer did not deliver its warm-up messages")
    start = time.perf_counter()
    _produce(producer, messages)
    if producer.flush(timeout_s) != 0:
        raise RuntimeError("the producer did not deliver every message")
    return time.perf_counter() - start


def _produce(producer: Producer, messages: Iterable[Message]) -> None:
    for topic, key, value in messages:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        producer.poll(0)
