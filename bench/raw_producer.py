"""A raw confluent-kafka producer loop: the baseline and topic filler the benchmarks share."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer


def produce_all(
    config: Mapping[str, object],
    messages: Iterable[tuple[str, bytes, bytes]],
    timeout_s: float = 120,
) -> float:
    """Produce (topic, key, value) messages as fast as the producer takes them; returns the
    seconds until every one is acknowledged. RuntimeError if some are not within `timeout_s`."""
    producer = Producer(dict(config))
    start = time.perf_counter()
    for topic, key, value in messages:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(timeout_s) != 0:
        raise RuntimeError("the producer did not deliver every message")
    return time.perf_counter() - start
