"""The serving subscriber: a replica follows ``models.channels`` and serves what it points at
(DESIGN §9).

Each replica reads the compacted ``models.channels`` from the beginning (every replica sees every
pointer: no consumer group), keeps the pointers of its model's production and canary channels,
and for each batch of pointers applies only the newest per channel ("newest wins": a slow replica
skips versions it never needed). Applying a pointer verifies the artifact's hash, loads it with
the caller's ``loader`` and swaps an immutable :class:`ServingSnapshot` in one reference
assignment, so a concurrent :meth:`ModelSubscriber.route` sees the old or the new snapshot, never
a mix. Each step is acked on ``models.acks`` (LOADING, then READY or REJECTED); a bad or missing
artifact, or a loader that raises, is REJECTED and the replica keeps its current version. With no
production pointer the replica serves the ``fallback`` (version 0, the heuristic policy).

Drive it with :meth:`ModelSubscriber.poll_once` (deterministic: applies every pointer published
before the call, e.g. between simulator batches) or :meth:`ModelSubscriber.start` (a background
thread).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from fleet.errors import ServingError
from ground.errors import FlywheelError
from model_registry.artifacts import verify_artifact
from model_registry.canary import canary_bucket
from model_registry.registry import (
    DEFAULT_TOPICS,
    FALLBACK_VERSION,
    ModelTopics,
    channel_key,
)
from schemas.enums import Channel, ReplicaState
from schemas.events import ChannelPointer, ReplicaAck
from streams.errors import TopicIOError
from streams.serde import AvroCodec
from streams.topic_io import EventProducer, watermarks
from streams.topics import MODEL_ACKS_TOPIC, MODEL_CHANNELS_TOPIC

T = TypeVar("T")
log = logging.getLogger(__name__)
SERVED_CHANNELS = (Channel.PRODUCTION, Channel.CANARY)  # production first: a canary may reuse it


@dataclass(frozen=True)
class ServedModel(Generic[T]):
    """A loaded version on one channel."""

    channel: Channel
    version: int
    model: T
    artifact_sha256: str
    traffic_fraction: float


@dataclass(frozen=True)
class ServingSnapshot(Generic[T]):
    """What a replica serves: immutable, replaced whole on every change."""

    production: ServedModel[T] | None = None
    canary: ServedModel[T] | None = None

    def on(self, channel: Channel) -> ServedModel[T] | None:
        return self.canary if channel is Channel.CANARY else self.production


class Routed(NamedTuple, Generic[T]):
    """Where one request goes: the channel, the version served there and its model."""

    channel: Channel
    version: int
    model: T


class ModelSubscriber(Generic[T]):
    """One serving replica of ``model_name``.

    ``loader(artifact_dir, version)`` turns a verified artifact into a model; whatever it raises
    rejects the version. ``fallback`` is served (as ``fallback_version``) while production points
    nowhere. Acks are written to ``topics.acks`` keyed by ``replica_id``. Raises ServingError when
    the channels topic does not exist.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        codec: AvroCodec,
        model_name: str,
        replica_id: str,
        loader: Callable[[Path, int], T],
        fallback: T,
        *,
        fallback_version: int = FALLBACK_VERSION,
        topics: ModelTopics = DEFAULT_TOPICS,
        poll_interval_s: float = 0.5,
        timeout_s: float = 30.0,
    ) -> None:
        self.model_name = model_name
        self.replica_id = replica_id
        self._codec = codec
        self._loader = loader
        self._fallback = fallback
        self._fallback_version = fallback_version
        self._topics = topics
        self._poll_interval_s = poll_interval_s
        self._timeout_s = timeout_s
        self._keys = {channel_key(model_name, c).encode(): c for c in SERVED_CHANNELS}
        self._snapshot: ServingSnapshot[T] = ServingSnapshot()
        self._poll_lock = threading.Lock()  # one reader of the consumer at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ack_failures = 0
        self.rejected = 0  # versions refused (bad artifact, loader failure): for metrics
        self._closed = False
        self._acks = EventProducer(kafka_config, timeout_s=5.0)
        self._consumer = Consumer(
            {
                **kafka_config,
                "group.id": f"_flywheel.serving.{replica_id}.{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "log_level": 4,
            }
        )
        # End offsets come from a second client: on the fetching consumer's connection, a
        # ListOffsets request waits behind the broker's long-polled fetch (fetch.wait.max.ms).
        self._offsets = Consumer({**kafka_config, "group.id": "_flywheel.serving.offsets"})
        self._partitions = self._assign()

    # Serving -------------------------------------------------------------------------------

    @property
    def snapshot(self) -> ServingSnapshot[T]:
        """The current snapshot (read once; it never changes under the caller)."""
        return self._snapshot

    @property
    def serving_version(self) -> int:
        """The production version served now (``fallback_version`` with no production)."""
        production = self._snapshot.production
        return production.version if production else self._fallback_version

    def route(self, user_id: str) -> Routed[T]:
        """The channel, version and model for ``user_id``: the canary for users whose
        :func:`canary_bucket` is below its traffic fraction, else production, else the fallback."""
        snapshot = self._snapshot  # one read: a concurrent swap cannot mix two snapshots
        canary = snapshot.canary
        if canary is not None and canary_bucket(self.model_name, user_id) < canary.traffic_fraction:
            return Routed(Channel.CANARY, canary.version, canary.model)
        if snapshot.production is not None:
            production = snapshot.production
            return Routed(Channel.PRODUCTION, production.version, production.model)
        return Routed(Channel.PRODUCTION, self._fallback_version, self._fallback)

    # Following the channels ----------------------------------------------------------------

    def poll_once(self, timeout_s: float | None = None) -> int:
        """Apply every pointer published before this call; returns how many channels changed.

        Raises ServingError when the pointers cannot be read within ``timeout_s`` (default:
        the constructor's ``timeout_s``).
        """
        with self._poll_lock:
            messages = self._read_available(timeout_s or self._timeout_s)
            return self._apply_batch(messages)

    def start(self) -> None:
        """Follow the channels in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            raise ServingError(f"replica {self.replica_id} is already started; stop() it first")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"model-subscriber-{self.replica_id}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the background thread (if started) and flush pending acks."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._flush_acks()

    def close(self) -> None:
        """Stop and release the Kafka clients; the replica serves nothing new afterwards."""
        self.stop()
        with self._poll_lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()
                self._offsets.close()

    def __enter__(self) -> ModelSubscriber[T]:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._poll_lock:
                    messages = self._fetch(self._poll_interval_s)
                    self._apply_batch(messages)
            except Exception:  # keep serving the current version whatever one batch did
                log.exception("replica %s: applying channel pointers failed", self.replica_id)
                self._stop.wait(self._poll_interval_s)

    def _assign(self) -> list[int]:
        topic = self._topics.channels
        metadata = self._consumer.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise ServingError(
                f"topic {topic} does not exist; create the platform's topics with "
                "`flywheel topics create` (or `flywheel stack up`)"
            )
        partitions = sorted(metadata.partitions)
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        return partitions

    def _read_available(self, timeout_s: float) -> list[Message]:
        topic = self._topics.channels
        ends: dict[int, int] = {}
        for partition in self._partitions:
            low, high = watermarks(self._offsets, TopicPartition(topic, partition), timeout_s)
            if high > low:
                ends[partition] = high
        messages: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            positions = self._consumer.position([TopicPartition(topic, p) for p in ends])
            for position in positions:
                if position.offset >= ends[position.partition]:
                    del ends[position.partition]
            if not ends:
                break
            if time.monotonic() > deadline:
                raise ServingError(
                    f"replica {self.replica_id} could not read {topic} to its end within "
                    f"{timeout_s:.0f}s; is the broker up? (`flywheel stack status`)"
                )
            fetched = self._fetch(0.1)
            messages.extend(fetched)
            for message in fetched:  # the end, also when compaction removed the last records
                if _is_eof(message) and (message.offset() or 0) >= ends.get(
                    message.partition() or 0, 0
                ):
                    ends.pop(message.partition() or 0, None)
        return messages

    def _fetch(self, timeout_s: float) -> list[Message]:
        """The messages queued now, waiting up to ``timeout_s`` for the first one.

        (``consume(n, timeout)`` alone would wait the whole timeout for fewer than n.)
        """
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        return [first, *self._consumer.consume(500, timeout=0)]

    def _apply_batch(self, messages: list[Message]) -> int:
        newest: dict[Channel, ChannelPointer | None] = {}  # None: the channel was cleared
        for message in messages:
            if message.error() is not None:
                if not _is_eof(message):
                    log.warning("replica %s: %s", self.replica_id, message.error())
                continue
            channel = self._keys.get(message.key() or b"")
            if channel is None:
                continue
            try:
                newest[channel] = self._decode(message)
            except FlywheelError as exc:  # an unreadable pointer must not stop the replica
                log.warning(
                    "replica %s skips offset %s: %s", self.replica_id, message.offset(), exc
                )
        changed = sum(self._apply(c, newest[c]) for c in SERVED_CHANNELS if c in newest)
        if newest:
            self._flush_acks()
        return changed

    def _decode(self, message: Message) -> ChannelPointer | None:
        value = message.value()
        if value is None:
            return None
        return ChannelPointer.from_record(self._codec.decode(MODEL_CHANNELS_TOPIC, value))

    def _apply(self, channel: Channel, pointer: ChannelPointer | None) -> bool:
        """Make ``channel`` serve ``pointer``; True when what the channel serves changed."""
        snapshot = self._snapshot
        current = snapshot.on(channel)
        if pointer is None:
            if current is None:
                return False
            self._swap(channel, None)
            return True
        if current and (current.version, current.artifact_sha256) == _identity(pointer):
            if current.traffic_fraction != pointer.traffic_fraction:
                self._swap(
                    channel, dataclasses.replace(current, traffic_fraction=pointer.traffic_fraction)
                )
            return False
        model = self._reuse(snapshot, pointer)
        if model is None:
            self._ack(pointer, ReplicaState.LOADING)
            try:
                path = verify_artifact(pointer.artifact_uri, pointer.artifact_sha256)
                model = (self._loader(path, pointer.version),)
            except Exception as exc:  # any failure to load rejects the version, never the replica
                log.warning("replica %s rejected v%d: %s", self.replica_id, pointer.version, exc)
                self.rejected += 1
                self._ack(pointer, ReplicaState.REJECTED, error=f"{type(exc).__name__}: {exc}")
                return False
        served = ServedModel(
            channel, pointer.version, model[0], pointer.artifact_sha256, pointer.traffic_fraction
        )
        self._swap(channel, served)
        self._ack(pointer, ReplicaState.READY)
        return True

    def _reuse(self, snapshot: ServingSnapshot[T], pointer: ChannelPointer) -> tuple[T] | None:
        # The same artifact already loaded on another channel (a canary promoted to production).
        for served in (snapshot.production, snapshot.canary):
            if served and (served.version, served.artifact_sha256) == _identity(pointer):
                return (served.model,)
        return None

    def _swap(self, channel: Channel, served: ServedModel[T] | None) -> None:
        field = "canary" if channel is Channel.CANARY else "production"
        self._snapshot = dataclasses.replace(self._snapshot, **{field: served})

    def _ack(self, pointer: ChannelPointer, state: ReplicaState, error: str | None = None) -> None:
        served = self._snapshot.on(pointer.channel)
        if served is not None:
            serving: int | None = served.version
        else:
            serving = self._fallback_version if pointer.channel is Channel.PRODUCTION else None
        ack = ReplicaAck(
            producer=f"fleet.subscriber/{self.replica_id}",
            replica_id=self.replica_id,
            model_name=self.model_name,
            version=pointer.version,
            state=state,
            serving_version=serving,
            error=error,
        )
        self._acks.send(
            self._topics.acks, self.replica_id, self._codec.encode_event(MODEL_ACKS_TOPIC, ack)
        )

    def _flush_acks(self) -> None:
        try:
            self._acks.flush()
        except TopicIOError as exc:  # an ack is a report: losing one must not stop serving
            self.ack_failures += 1
            log.warning("replica %s: acks not delivered: %s", self.replica_id, exc)


def _is_eof(message: Message) -> bool:
    error = message.error()
    return error is not None and error.code() == KafkaError._PARTITION_EOF


def _identity(pointer: ChannelPointer) -> tuple[int, str]:
    return pointer.version, pointer.artifact_sha256
