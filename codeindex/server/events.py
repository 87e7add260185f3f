"""The index's event log: what a server publishes on `index.files` / `index.embeddings`, and how a
replica rebuilds its state from them and keeps following (docs/index.md, "Events").

Records are encoded with the schema of the contract topic (`index.*`) whatever topic they are
written to, so tests and mirrors use their own topics (`IndexTopics.prefixed`). Deletions are
tombstones (null values) of the record's key, which compaction removes from the log.

Each record carries the header `flywheel.index.origin`: the id of the server process that wrote
it. A server applies its own changes to its state when it makes them and skips its own records
when it follows the topics; another process's it applies in log order. A new replica has a new
origin, so its rebuild applies every record.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from numpy.typing import NDArray

from codeindex.protocol import ChunkRef, FileEntry
from codeindex.server.embedder import embedder_id, from_wire, to_wire
from codeindex.server.errors import EventLogError
from codeindex.server.state import FileChange, IndexState
from schemas.events import ChunkEmbedded, IndexedChunk, IndexFileUpdated
from streams.errors import TopicIOError
from streams.serde import Codec, Decoder
from streams.topic_io import watermarks
from streams.topics import INDEX_EMBEDDINGS_TOPIC, INDEX_FILES_TOPIC, TopicSpec, topic

log = logging.getLogger(__name__)
ORIGIN_HEADER = "flywheel.index.origin"


@dataclass(frozen=True)
class IndexTopics:
    """The topics an index server writes and follows; tests point them at their own."""

    files: str = INDEX_FILES_TOPIC
    embeddings: str = INDEX_EMBEDDINGS_TOPIC

    @classmethod
    def prefixed(cls, prefix: str) -> IndexTopics:
        """A private copy: `<prefix>.files`, `<prefix>.embeddings`."""
        return cls(f"{prefix}.files", f"{prefix}.embeddings")

    def specs(self) -> list[TopicSpec]:
        """The contract topics' declarations under these names, to create them."""
        pairs = ((INDEX_FILES_TOPIC, self.files), (INDEX_EMBEDDINGS_TOPIC, self.embeddings))
        return [dataclasses.replace(topic(contract), name=name) for contract, name in pairs]


def file_key(ws: str, path: str) -> str:
    return f"{ws}/{path}"


def embedding_key(embedder: str, chunk: str) -> str:
    return f"{embedder}@{chunk}"


class RecordSink(Protocol):
    """Where records go (`streams.topic_io.EventProducer`): `send` queues, `flush` confirms
    every queued record or raises TopicIOError."""

    def send(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> None: ...

    def flush(self) -> None: ...


class IndexEventLog:
    """Publishes one server's changes; each `publish_*` returns once the broker acknowledged
    every record (EventLogError otherwise: the caller leaves its state unchanged)."""

    def __init__(
        self,
        sink: RecordSink,
        codec: Codec,
        *,
        embedder_name: str,
        embedder_version: str,
        dim: int,
        producer: str,
        origin: str,
        topics: IndexTopics = IndexTopics(),
    ) -> None:
        self._sink = sink
        self._codec = codec
        self._name, self._version, self._dim = embedder_name, embedder_version, dim
        self._embedder = embedder_id(embedder_name, embedder_version)
        self._producer = producer
        self._headers = [(ORIGIN_HEADER, origin.encode())]
        self.topics = topics
        self.published = 0  # records acknowledged, for metrics

    def publish_files(self, ws: str, changes: Sequence[FileChange]) -> None:
        """An IndexFileUpdated per upsert, a tombstone per delete, in the order given."""
        for path, entry in changes:
            value = None
            if entry is not None:
                event = IndexFileUpdated(
                    producer=self._producer, workspace_id=ws, path=path, file_hash=entry.hash,
                    chunks=tuple(IndexedChunk(hash=c.hash, start_line=c.start, end_line=c.end)
                                 for c in entry.chunks),
                )  # fmt: skip
                value = self._codec.encode(INDEX_FILES_TOPIC, event.to_record())
            self._sink.send(self.topics.files, file_key(ws, path), value, self._headers)
        self._flush(len(changes))

    def publish_embeddings(self, vectors: Mapping[str, NDArray[np.floating]]) -> None:
        """A ChunkEmbedded per chunk hash -> vector [dim]."""
        for chunk, vector in vectors.items():
            event = ChunkEmbedded(
                producer=self._producer, chunk_hash=chunk, embedder_name=self._name,
                embedder_version=self._version, dim=self._dim, vector=to_wire(vector),
            )  # fmt: skip
            value = self._codec.encode(INDEX_EMBEDDINGS_TOPIC, event.to_record())
            key = embedding_key(self._embedder, chunk)
            self._sink.send(self.topics.embeddings, key, value, self._headers)
        self._flush(len(vectors))

    def publish_dropped(self, chunks: Sequence[str]) -> None:
        """A tombstone for each chunk's embedding."""
        for chunk in chunks:
            key = embedding_key(self._embedder, chunk)
            self._sink.send(self.topics.embeddings, key, None, self._headers)
        self._flush(len(chunks))

    def _flush(self, count: int) -> None:
        try:
            self._sink.flush()
        except TopicIOError as exc:
            raise EventLogError(f"the index's topics did not take the change: {exc}") from exc
        self.published += count


class LogApplier:
    """Applies records of the index's topics to a state: pure (no Kafka), so tests feed it
    records directly. Records of another embedder, and undecodable ones, are skipped and counted."""

    def __init__(
        self,
        state: IndexState,
        codec: Decoder,
        *,
        embedder_name: str,
        embedder_version: str,
        topics: IndexTopics = IndexTopics(),
        origin: str | None = None,
    ) -> None:
        self._state = state
        self._codec = codec
        self._name, self._version = embedder_name, embedder_version
        self._embedder = embedder_id(embedder_name, embedder_version)
        self._topics = topics
        self._origin = None if origin is None else origin.encode()
        self.applied = 0
        self.skipped = 0  # other embedders' records, this process's own, undecodable ones

    def apply(
        self,
        topic_name: str,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, str | bytes | None]] = (),
    ) -> None:
        if self._origin is not None and (ORIGIN_HEADER, self._origin) in list(headers):
            self.skipped += 1
            return
        try:
            text = (key or b"").decode()
            if topic_name == self._topics.files:
                self._apply_file(text, value)
            elif topic_name == self._topics.embeddings:
                self._apply_embedding(text, value)
            else:
                raise ValueError(f"topic {topic_name} is not one of the index's")
        except Exception as exc:  # one bad record must not stop a replica
            log.warning("skipped a record of %s (key %r): %s", topic_name, key, exc)
            self.skipped += 1

    def _apply_file(self, key: str, value: bytes | None) -> None:
        ws, _, path = key.partition("/")
        if value is None:
            self._state.apply_file(ws, path, None)
        else:
            event = IndexFileUpdated.from_record(self._codec.decode(INDEX_FILES_TOPIC, value))
            chunks = tuple(ChunkRef(c.hash, c.start_line, c.end_line) for c in event.chunks)
            self._state.apply_file(ws, path, FileEntry(event.path, event.file_hash, chunks))
        self.applied += 1

    def _apply_embedding(self, key: str, value: bytes | None) -> None:
        embedder, _, chunk = key.rpartition("@")
        if embedder != self._embedder:
            self.skipped += 1  # another embedder's vectors: useless to this replica
            return
        if value is None:
            self._state.drop_embedding(chunk)
        else:
            event = ChunkEmbedded.from_record(self._codec.decode(INDEX_EMBEDDINGS_TOPIC, value))
            self._state.add_embedding(chunk, from_wire(event.vector, event.dim))
        self.applied += 1


class IndexFollower:
    """Reads both topics from the beginning into a `LogApplier`, then follows them.

    `catch_up` returns once every record written before it was called is applied (the end
    offsets are taken when it starts); `start` then follows in a daemon thread. No consumer
    group: every replica reads everything. Raises EventLogError when a topic does not exist or
    the catch-up takes longer than `timeout_s`.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, str],
        applier: LogApplier,
        topics: IndexTopics = IndexTopics(),
        *,
        timeout_s: float = 120.0,
    ) -> None:
        self._applier = applier
        self._topics = topics
        self._timeout_s = timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.caught_up = threading.Event()
        self._consumer = Consumer(
            {
                **kafka_config,
                "group.id": f"_flywheel.index.{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "log_level": 4,
            }
        )
        self._ends = self._assign()

    def _assign(self) -> dict[tuple[str, int], int]:
        ends: dict[tuple[str, int], int] = {}
        assignment: list[TopicPartition] = []
        for name in (self._topics.files, self._topics.embeddings):
            meta = self._consumer.list_topics(name, timeout=self._timeout_s).topics.get(name)
            if meta is None or meta.error is not None or not meta.partitions:
                raise EventLogError(
                    f"topic {name} does not exist; create the platform's topics with "
                    "`flywheel topics create` (or `flywheel stack up`)"
                )
            for partition in sorted(meta.partitions):
                tp = TopicPartition(name, partition)
                low, high = watermarks(self._consumer, tp, self._timeout_s)
                if high > low:
                    ends[(name, partition)] = high
                assignment.append(TopicPartition(name, partition, low))
        self._consumer.assign(assignment)
        return ends

    def catch_up(self) -> None:
        """Apply every record up to the end offsets taken at construction."""
        deadline = time.monotonic() + self._timeout_s
        while self._ends:
            if time.monotonic() > deadline:
                raise EventLogError(
                    f"rebuilding from {self._topics.files} and {self._topics.embeddings} did not "
                    f"finish within {self._timeout_s:.0f}s; is the broker up?"
                )
            self._poll(0.2)
        self.caught_up.set()

    def _poll(self, timeout_s: float) -> int:
        first = self._consumer.poll(timeout_s)
        if first is None:
            return 0
        batch = [first, *self._consumer.consume(500, timeout=0)]
        for message in batch:
            self._handle(message)
        return len(batch)

    def _handle(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("reading the index's topics: %s", error)
            return
        name, partition = message.topic() or "", message.partition() or 0
        offset = message.offset() or 0
        raw = message.headers() or []
        headers = list(raw.items()) if isinstance(raw, dict) else raw
        self._applier.apply(name, message.key(), message.value(), headers)
        end = self._ends.get((name, partition))
        if end is not None and offset >= end - 1:
            del self._ends[(name, partition)]

    def start(self) -> None:
        """Follow the topics in a daemon thread until `close`."""
        self._thread = threading.Thread(target=self._follow, name="index-follower", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll(0.5)
            except Exception:  # keep following: a replica that stops reading serves stale data
                log.exception("following the index's topics failed; retrying")
                self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._consumer.close()


def rebuild(
    kafka_config: Mapping[str, str],
    applier: LogApplier,
    topics: IndexTopics = IndexTopics(),
    *,
    follow: bool = True,
    timeout_s: float = 120.0,
) -> IndexFollower:
    """Build `applier`'s state from both topics, from the beginning to their ends now, then (if
    `follow`) keep applying new records in a daemon thread. Close the follower when done."""
    follower = IndexFollower(kafka_config, applier, topics, timeout_s=timeout_s)
    try:
        follower.catch_up()
    except BaseException:
        follower.close()
        raise
    if follow:
        follower.start()
    return follower
