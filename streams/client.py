"""`TelemetryClient`: the SDK IDE plug-ins and agents emit events through.

Events are validated against their schema before anything is sent (a clear error names the
field), made private at the source (ids pseudonymised, code text dropped in privacy mode and
redacted otherwise), encoded once in the Confluent wire format and produced with an idempotent,
`acks=all`, zstd-compressed, murmur2-partitioned producer, keyed per DESIGN §3.

Nothing is lost on `close()` or when the broker is unreachable: events without an ack go to the
local disk spool and are re-sent, in order per key, when the next client starts on the same
spool. The log is at-least-once: an event whose ack was lost can appear twice, with the same
`event_id`, which consumers deduplicate on (docs/sdk.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from schemas.events import (
    AgentCompletion,
    AgentFeedback,
    EditObserved,
    Event,
    RolloutResult,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
)
from streams.errors import EventValidationError
from streams.privacy import Pseudonymizer, apply_privacy
from streams.serde import AvroCodec
from streams.spool import Spool, SpooledEvent
from streams.topics import (
    COMPLETIONS_TOPIC,
    EDITS_TOPIC,
    FEEDBACK_TOPIC,
    OUTCOMES_TOPIC,
    ROLLOUTS_TOPIC,
    SUGGESTIONS_TOPIC,
    TESTS_TOPIC,
)

# Event type -> (topic, key field). Only what IDE clients and agents emit goes through the SDK.
ROUTES: Mapping[type[Event], tuple[str, str]] = {
    SuggestionOffered: (SUGGESTIONS_TOPIC, "session_id"),
    SuggestionOutcome: (OUTCOMES_TOPIC, "session_id"),
    EditObserved: (EDITS_TOPIC, "session_id"),
    TestRunCompleted: (TESTS_TOPIC, "session_id"),
    RolloutResult: (ROLLOUTS_TOPIC, "group_id"),
    AgentCompletion: (COMPLETIONS_TOPIC, "session_id"),  # serving replicas
    AgentFeedback: (FEEDBACK_TOPIC, "session_id"),
}

# The topics the SDK writes to.
CLIENT_TOPICS: tuple[str, ...] = tuple(sorted({topic for topic, _ in ROUTES.values()}))

_SPOOLED_ERRORS = {  # the broker may take these later; anything else is a permanent failure
    KafkaError._MSG_TIMED_OUT,
    KafkaError._PURGE_QUEUE,
    KafkaError._PURGE_INFLIGHT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
}
_QUEUE_FULL_WAIT_S = 1.0
_PURGE_REPORTS_S = 5.0  # close(): the longest wait for the delivery reports of purged events
_POLL_EVERY = 64


def producer_config(
    kafka_config: Mapping[str, str], linger_ms: int = 20, delivery_timeout_ms: int = 120_000
) -> dict[str, object]:
    """The confluent-kafka config the SDK produces with: `kafka_config` (bootstrap, security)
    plus idempotence, `acks=all`, zstd, `linger_ms` and the murmur2 partitioner (DESIGN §3).
    Benchmarks build their baseline producer from it, so both sides batch the same way."""
    return {
        **kafka_config,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": "zstd",
        "linger.ms": linger_ms,
        "partitioner": "murmur2_random",
        "message.timeout.ms": delivery_timeout_ms,
    }


@dataclass
class DeliveryStats:
    """Delivery accounting since the client started."""

    sent: int = 0  # handed to the producer (re-sent spooled events included)
    acked: int = 0  # acknowledged by the broker
    failed: int = 0  # refused for good (e.g. record too large, not authorised)
    spooled: int = 0  # written to the disk spool for a later client
    resent: int = 0  # taken from the spool at start


class TelemetryClient:
    """Sends telemetry and rollout events to Kafka; see the module docstring for guarantees.

    Thread-safe. Use as a context manager, or call `close()`: it flushes for `close_timeout_s`
    and spools whatever is still unacknowledged.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        codec: AvroCodec,
        spool_dir: Path,
        pseudonymizer: Pseudonymizer,
        *,
        linger_ms: int = 20,
        delivery_timeout_ms: int = 120_000,
        close_timeout_s: float = 10.0,
        topics: Mapping[str, str] | None = None,
    ) -> None:
        """``topics``: platform topic → the topic written instead (a test's or a mirror's
        copy); the schema stays the platform topic's."""
        self._codec = codec
        self._topics = dict(topics or {})
        self._pseudonymizer = pseudonymizer
        self._close_timeout_s = close_timeout_s
        self._spool = Spool(spool_dir)
        self._producer = Producer(producer_config(kafka_config, linger_ms, delivery_timeout_ms))
        self.stats = DeliveryStats()
        self._lock = threading.Lock()
        # Filled by delivery reports (in queue order per partition); no per-event bookkeeping
        # on the hot path: a failed report carries the topic, key and bytes to spool.
        self._to_spool: list[SpooledEvent] = []
        self._closed = False
        self._old_segments = self._resend_spool()

    # One method per event kind, for IDE plug-ins and agents.
    def suggestion_offered(self, event: SuggestionOffered) -> None:
        self.send(event)

    def suggestion_outcome(self, event: SuggestionOutcome) -> None:
        self.send(event)

    def edit_observed(self, event: EditObserved) -> None:
        self.send(event)

    def test_run_completed(self, event: TestRunCompleted) -> None:
        self.send(event)

    def rollout_result(self, event: RolloutResult) -> None:
        self.send(event)

    def agent_completion(self, event: AgentCompletion) -> None:
        """A completion the agent model served (sent by serving replicas)."""
        self.send(event)

    def agent_feedback(self, event: AgentFeedback) -> None:
        """The user's reaction to a served completion (``completion_id`` from the API's
        response: ``<id>:<choice index>``)."""
        self.send(event)

    def send(self, event: Event) -> None:
        """Validate, privatise, encode and enqueue `event`; it is sent in the background.

        Raises EventValidationError (nothing is sent) when the event does not match its schema
        or is of a kind the SDK does not emit.
        """
        route = ROUTES.get(type(event))
        if route is None:
            raise EventValidationError(
                f"{type(event).__name__} is not emitted by clients; the SDK sends "
                f"{', '.join(t.__name__ for t in ROUTES)}"
            )
        topic, key_field = route
        record = event.to_record()
        if isinstance(event, SuggestionOffered):
            self._privatise(record)
        elif isinstance(event, AgentCompletion | AgentFeedback):
            self._privatise_agent(record)
        value = self._codec.encode(topic, record)
        self._enqueue(self._topics.get(topic, topic), str(record[key_field]).encode(), value)

    def _privatise(self, offered: dict[str, Any]) -> None:
        """Pseudonymise ids and drop or redact code text, in the record about to be encoded."""
        offered["user_id"] = self._pseudonymizer.pseudonym("user", offered["user_id"])
        offered["repo_id"] = self._pseudonymizer.pseudonym("repo", offered["repo_id"])
        offered["suggestion_text"] = apply_privacy(
            offered["suggestion_text"], offered["privacy_mode"]
        )

    def _privatise_agent(self, record: dict[str, Any]) -> None:
        """Pseudonymise the user; a completion in privacy mode keeps counts and ids only."""
        if record["user_id"] is not None:
            record["user_id"] = self._pseudonymizer.pseudonym("user", record["user_id"])
        if "completion_text" not in record:
            return
        record["completion_text"] = apply_privacy(record["completion_text"], record["privacy_mode"])
        if record["privacy_mode"]:
            for name in ("prompt_token_ids", "completion_token_ids", "behaviour_logprobs"):
                record[name] = None
            for name in ("prompt_mask", "prompt_logprobs"):  # v2: which prompt tokens it wrote
                record[name] = []

    def _enqueue(self, topic: str, key: bytes, value: bytes) -> None:
        if self._closed:
            raise RuntimeError("the TelemetryClient is closed")
        with self._lock:
            self.stats.sent += 1
            sent = self.stats.sent
        try:
            self._producer.produce(topic, value, key, on_delivery=self._delivered)
        except BufferError:  # local queue full: the slow path, off the hot one
            self._enqueue_when_room(topic, key, value)
        if sent % _POLL_EVERY == 0:  # serve delivery reports in batches, not per event
            self._producer.poll(0)

    def _enqueue_when_room(self, topic: str, key: bytes, value: bytes) -> None:
        """Serve delivery reports until the queue takes the event, for up to
        `_QUEUE_FULL_WAIT_S`; then the broker is not taking events: spool it."""
        deadline = time.monotonic() + _QUEUE_FULL_WAIT_S
        while time.monotonic() <= deadline:
            self._producer.poll(0.05)
            try:
                self._producer.produce(topic, value, key, on_delivery=self._delivered)
                return
            except BufferError:
                continue
        with self._lock:
            self._to_spool.append(SpooledEvent(topic, key, value))

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        with self._lock:
            if error is None:
                self.stats.acked += 1
            elif error.code() in _SPOOLED_ERRORS or error.retriable():
                self._to_spool.append(
                    SpooledEvent(
                        message.topic() or "", message.key() or b"", message.value() or b""
                    )
                )
            else:
                self.stats.failed += 1

    @property
    def closed(self) -> bool:
        """True after `close()`: the gateway's health check reports it."""
        return self._closed

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait up to `timeout_s` for acks; returns how many events are still in flight.

        Events that failed with a retriable error are written to the spool here.
        """
        self._producer.flush(timeout_s)
        with self._lock:
            failed, self._to_spool = self._to_spool, []
        pending = len(self._producer)  # still queued or in flight
        # Events the broker did not take in time are made durable now, not kept in memory.
        if self._spool.write(failed) is not None:
            self.stats.spooled += len(failed)
        if pending == 0:
            self._forget_old_segments()
        return pending

    def close(self) -> DeliveryStats:
        """Flush, then spool every unacknowledged event for the next client. Idempotent."""
        if self._closed:
            return self.stats
        self.flush(self._close_timeout_s)
        self._closed = True
        self._producer.purge(in_queue=True, in_flight=True, blocking=True)
        # Serve the purge's delivery reports. Those of requests in flight to a broker that
        # hangs (it took the bytes, it sends no answer) come only once their requests are
        # given up, a moment after the purge: until every sent event is accounted for.
        deadline = time.monotonic() + _PURGE_REPORTS_S
        accounted = False
        while not accounted and time.monotonic() <= deadline:
            self._producer.flush(0.1)
            with self._lock:
                reported = self.stats.acked + self.stats.failed + len(self._to_spool)
            accounted = reported + self.stats.spooled >= self.stats.sent
        with self._lock:
            leftover, self._to_spool = self._to_spool, []
        if self._spool.write(leftover) is not None:
            self.stats.spooled += len(leftover)
        if accounted:  # else an event re-sent from them may have no report: keep them (dupes
            self._forget_old_segments()  # are deduplicated downstream, losses are not)
        self._spool.close()
        return self.stats

    def _resend_spool(self) -> list[Path]:
        segments = self._spool.segments()
        for segment in segments:
            for event in self._spool.read(segment):
                self.stats.resent += 1
                self._enqueue(event.topic, event.key, event.value)
        return segments

    def _forget_old_segments(self) -> None:
        for segment in self._old_segments:
            self._spool.remove(segment)
        self._old_segments = []

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
