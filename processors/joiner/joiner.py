"""The joiner's steps over table-like state, free of faust (unit-testable with dicts).

`RewardJoiner.on_batch` applies source records in order: it decodes, dead-letters, folds each
event into its suggestions' pending state, advances its input's watermark and attributes every
suggestion of that partition whose deadline fell behind the partition's attribution watermark -
allowed lateness; then it writes each changed key once (`Batch`).

Watermarks are kept per input topic and partition, as in Flink: an event is late only against
its own topic's watermark (within a topic partition events arrive in event-time order), and a
partition's attribution watermark is the minimum over its inputs, leaving out inputs idle for
`idle_s` of wall clock. A fetch that brings one topic far ahead of another (a backlog, a slow
topic) therefore delays attribution instead of sending the slower topic's events to dlq.late.
All reward math is `processors.rewards`'; this module only moves state and records.

State layout (one table, so one changelog partition holds all of a partition's state in
order): `<suggestion_id>` → JSON `{"p": partition, "k": session_id, "e": [[platform_topic,
base64 Avro value], ...]}` (the suggestion's source records; see `_Stored`);
`\\x00wm/<topic>/<partition>` → an input's watermark (epoch ms);
`\\x00off/<topic>/<partition>` → the last
source offset applied. Due suggestions are found through an in-memory heap of deadlines per
partition, rebuilt from the table on first use and after a rebalance. Offset markers are
written after the state they cover, so after a crash a replayed record at or below one is
skipped: state updates apply once even though Kafka offsets are committed at least once.
"""

from __future__ import annotations

import base64
import heapq
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from processors.joiner.dead_letters import late_dead_letter, rejected_dead_letter
from processors.joiner.stats import JoinerStats
from processors.lake.dead_letters import DeadLetter, Origin
from processors.rewards.attribution import (
    PendingSuggestion,
    Watermark,
    Windows,
    add,
    attribute,
    combined_watermark,
    deadline_ms,
    is_late,
    rewards,
    suggestion_ids_of,
)
from processors.rewards.errors import RewardError
from processors.rewards.functions import RewardFunction
from schemas.catalog import TOPIC_VALUE_SCHEMAS
from schemas.errors import SchemaError
from schemas.events import EVENT_TYPES, Event, Reward
from schemas.records import encode_time
from streams.serde import AvroCodec, DecodeError

MARK = "\x00"  # prefix of bookkeeping keys; no session id starts with NUL

Emit = Callable[[bytes, bytes], Awaitable[None]]  # (key, Avro value) to the rewards topic
SendDeadLetter = Callable[[str, DeadLetter], Awaitable[None]]  # (dlq topic, record)
State = MutableMapping[str, Any]  # the rollout grouper's table


@dataclass(frozen=True)
class SourceRecord:
    """One record read from a source topic; `platform_topic` names its schema."""

    topic: str
    platform_topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes

    def origin(self) -> Origin:
        return Origin(self.topic, self.partition, self.offset, self.key, self.value)


@dataclass(frozen=True)
class Outputs:
    """Where the joiner's records go."""

    emit: Emit
    dead_letter: SendDeadLetter
    dlq_late: str
    dlq_joiner: str
    producer: str


def offset_key(topic: str, partition: int) -> str:
    return f"{MARK}off/{topic}/{partition}"


# The inputs joined per suggestion (platform topic names); their watermarks gate attribution.
JOINED_TOPICS = (
    "telemetry.suggestions",
    "telemetry.outcomes",
    "telemetry.edits",
    "telemetry.tests",
)
DEFAULT_IDLE_S = 2.0


def watermark_key(topic: str, partition: int) -> str:
    return f"{MARK}wm/{topic}/{partition}"


def now_utc() -> datetime:
    return datetime.now(UTC)


@runtime_checkable
class ChangelogState(Protocol):
    """Table-like state whose writes name their changelog partition (the source partition of
    the records they derive from), so they can be made outside faust's per-event context."""

    def get(self, key: str) -> Any: ...

    def put(self, partition: int, key: str, value: Any) -> None: ...

    def delete(self, partition: int, key: str) -> None: ...

    def items(self) -> Iterable[tuple[str, Any]]: ...


class DictState:
    """`ChangelogState` over a plain mapping (tests, tools): no changelog."""

    def __init__(self, data: MutableMapping[str, Any]) -> None:
        self.data = data

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def put(self, partition: int, key: str, value: Any) -> None:
        self.data[key] = value

    def delete(self, partition: int, key: str) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterable[tuple[str, Any]]:
        return list(self.data.items())


class _Stored:
    """A suggestion's state as written to the table: JSON `{"p": partition, "k": session_id,
    "e": [[platform_topic, base64 Avro value], ...]}`, the source records folded into it.
    Keeping the records' own bytes makes a write cheap (no re-encoding of offers with code text
    and context vectors); they are decoded again only after a restart or rebalance. Documents
    of the previous layout (`"s"`: `PendingSuggestion.to_json()`) are still read, and written
    back in that layout, since their source records are unknown."""

    __slots__ = ("events", "partition", "pending", "session")

    def __init__(
        self,
        partition: int,
        session: str,
        pending: PendingSuggestion,
        events: tuple[tuple[str, bytes], ...] | None,
    ) -> None:
        self.partition, self.session, self.pending, self.events = (
            partition,
            session,
            pending,
            events,
        )

    def to_json(self) -> str:
        doc: dict[str, Any] = {"p": self.partition, "k": self.session}
        if self.events is None:
            doc["s"] = self.pending.to_json()
        else:
            doc["e"] = [[t, base64.b64encode(v).decode("ascii")] for t, v in self.events]
        return json.dumps(doc, separators=(",", ":"))


class Batch:
    """Write-back view of the state for one batch of records: reads see the batch's own writes;
    `flush` then writes each changed key once (one changelog record per key per batch instead
    of one per event). Suggestion keys are flushed before the bookkeeping keys (offset markers,
    watermarks), so a marker never covers state that was not written."""

    def __init__(self, state: ChangelogState) -> None:
        self._state = state
        self._dirty: dict[str, tuple[int, Any]] = {}  # key -> (changelog partition, value|None)

    def get(self, key: str) -> Any:
        hit = self._dirty.get(key)
        return self._state.get(key) if hit is None else hit[1]

    def put(self, partition: int, key: str, value: Any) -> None:
        self._dirty[key] = (partition, value)

    def delete(self, partition: int, key: str) -> None:
        self._dirty[key] = (partition, None)

    def flush(self) -> None:
        marks = []
        for key, (partition, value) in self._dirty.items():
            if key.startswith(MARK):
                marks.append((key, partition, value))
            else:
                self._write(partition, key, value)
        for key, partition, value in marks:
            self._write(partition, key, value)
        self._dirty.clear()

    def _write(self, partition: int, key: str, value: Any) -> None:
        if value is None:
            self._state.delete(partition, key)
        else:
            self._state.put(
                partition, key, value.to_json() if isinstance(value, _Stored) else value
            )


class RewardJoiner:
    """Joins the four telemetry topics per suggestion and emits one Reward per function."""

    def __init__(
        self,
        state: ChangelogState | MutableMapping[str, Any],
        codec: AvroCodec,
        functions: Sequence[RewardFunction],
        windows: Windows,
        outputs: Outputs,
        stats: JoinerStats,
        clock: Callable[[], datetime] = now_utc,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``idle_s``: wall seconds without progress after which an input stops holding back
        the partition's attribution watermark (``monotonic`` reads that clock)."""
        self._state = state if isinstance(state, ChangelogState) else DictState(state)
        self._idle_s, self._monotonic = idle_s, monotonic
        # (topic, partition) → monotonic time its watermark last advanced (memory only); an
        # input not seen moving since this process started counts from the start.
        self._advanced: dict[tuple[str, int], float] = {}
        self._started = monotonic()
        self._codec = codec
        self._functions = tuple(functions)
        self._windows = windows
        self._out = outputs
        self._stats = stats
        self._clock = clock
        # Deadlines per partition, in memory only (missing: rebuild from the table).
        self._deadlines: dict[int, list[tuple[int, str]]] = {}
        # Decoded PendingSuggestions of the stored JSON values (a cache: the table is the truth).
        self._pending: dict[str, _Stored] = {}
        self._event_types = {
            topic: EVENT_TYPES[schema] for topic, schema in TOPIC_VALUE_SCHEMAS.items()
        }

    def forget_deadlines(self) -> None:
        """Drop the in-memory indexes (after a rebalance the table may hold other state)."""
        self._deadlines.clear()
        self._pending.clear()

    async def on_event(self, rec: SourceRecord) -> None:
        """Apply one source record (a batch of one)."""
        await self.on_batch([rec])

    async def on_batch(self, records: Sequence[SourceRecord]) -> None:
        """Apply source records in order, then write the changed state once per key.

        Never raises for bad input: it becomes a dead letter. Nothing in here yields to the
        event loop unless an output callback does (faust's are `send_soon`), so under
        exactly_once a commit never falls in the middle of a batch.
        """
        batch = Batch(self._state)
        for rec in records:
            marker = offset_key(rec.topic, rec.partition)
            applied = batch.get(marker)
            if applied is not None and rec.offset <= int(applied):
                continue  # a replay after a crash: its effects are already in the table
            self._stats.saw_input()
            event = await self._decode(rec)
            if event is not None:
                await self._fold(batch, rec, event)
            batch.put(rec.partition, marker, rec.offset)
        batch.flush()

    async def _decode(self, rec: SourceRecord) -> Event | None:
        try:
            record = self._codec.decode(rec.platform_topic, rec.value)
            return self._event_types[rec.platform_topic].from_record(record)
        except DecodeError as exc:
            letter = rejected_dead_letter(exc.cause, str(exc), rec.origin(), rec.platform_topic)
        except SchemaError as exc:
            letter = rejected_dead_letter(
                "invalid_value", str(exc), rec.origin(), rec.platform_topic
            )
        self._stats.dead_letters += 1
        await self._out.dead_letter(self._out.dlq_joiner, letter)
        return None

    async def _fold(self, batch: Batch, rec: SourceRecord, event: Event) -> None:
        event_ms = encode_time(event.event_time)
        key = watermark_key(rec.platform_topic, rec.partition)
        stored = batch.get(key)
        watermark = Watermark(None if stored is None else int(stored))
        if is_late(event_ms, watermark.value_ms, self._windows):
            await self._late(rec, event, event_ms, watermark.value_ms or 0)
            return
        ids = suggestion_ids_of(event)
        session_id = str(getattr(event, "session_id", ""))
        self._heap(rec.partition)  # built before this batch's writes to it (it scans the table)
        if ids and session_id:
            self._add(batch, rec, session_id, ids, event)
        watermark.observe(event_ms)
        if watermark.value_ms != stored and watermark.value_ms is not None:
            batch.put(rec.partition, key, watermark.value_ms)
            self._advanced[(rec.platform_topic, rec.partition)] = self._monotonic()
        attribution_ms = self._attribution_watermark(batch, rec.partition)
        if attribution_ms is not None:
            await self._attribute_due(batch, rec.partition, attribution_ms)

    def _attribution_watermark(self, batch: Batch, partition: int) -> int | None:
        """The minimum of the partition's input watermarks, idle inputs left out."""
        now = self._monotonic()
        marks: dict[str, int] = {}
        idle: set[str] = set()
        for topic in JOINED_TOPICS:
            value = batch.get(watermark_key(topic, partition))
            if value is None:
                continue
            marks[topic] = int(value)
            # An input that has not moved since a restart goes idle idle_s after the start.
            if now - self._advanced.get((topic, partition), self._started) > self._idle_s:
                idle.add(topic)
        return combined_watermark(marks, idle)

    async def _late(self, rec: SourceRecord, event: Event, event_ms: int, wm_ms: int) -> None:
        reason = (
            f"event_time {event_ms} ms is {wm_ms - event_ms} ms behind the watermark {wm_ms} ms "
            f"of {rec.platform_topic} partition {rec.partition}, more than the allowed lateness of "
            f"{self._windows.allowed_lateness_ms} ms"
        )
        letter = late_dead_letter(reason, event.to_record(), rec.origin(), rec.platform_topic)
        self._stats.late += 1
        await self._out.dead_letter(self._out.dlq_late, letter)

    def _load(self, batch: Batch, sid: str) -> _Stored | None:
        """The stored suggestion; None when there is none."""
        raw = batch.get(sid)
        if raw is None:
            self._pending.pop(sid, None)
            return None
        if isinstance(raw, _Stored):
            return raw
        cached = self._pending.get(sid)
        if cached is None:
            cached = self._pending[sid] = self._parse(raw)
        return cached

    def _parse(self, raw: str) -> _Stored:
        """A stored JSON document (either layout, see `_Stored`) as a `_Stored`."""
        doc = json.loads(raw)
        if "s" in doc:
            pending = PendingSuggestion.from_json(doc["s"])
            return _Stored(int(doc["p"]), str(doc["k"]), pending, None)
        events = tuple((str(t), base64.b64decode(v)) for t, v in doc["e"])
        folded: PendingSuggestion | None = None
        for topic, value in events:
            record = self._codec.decode(topic, value)
            folded = add(folded, self._event_types[topic].from_record(record))
        if folded is None:
            raise RewardError(f"stored suggestion state {raw[:80]!r} holds no events")
        return _Stored(int(doc["p"]), str(doc["k"]), folded, events)

    def _add(
        self, batch: Batch, rec: SourceRecord, session_id: str, ids: Sequence[str], event: Event
    ) -> None:
        for sid in ids:
            stored = self._load(batch, sid)
            before = None if stored is None else stored.pending
            pending = add(before, event)
            if pending == before:
                continue  # a duplicate: nothing changed
            source = (rec.platform_topic, rec.value)
            if stored is None:
                events: tuple[tuple[str, bytes], ...] | None = (source,)
            else:
                events = None if stored.events is None else (*stored.events, source)
            new = _Stored(rec.partition, session_id, pending, events)
            self._pending[sid] = new
            batch.put(rec.partition, sid, new)
            due = deadline_ms(pending, self._windows)
            heap = self._deadlines.get(rec.partition)
            if due is not None and heap is not None and due != _deadline(before, self._windows):
                heapq.heappush(heap, (due, sid))

    def _heap(self, partition: int) -> list[tuple[int, str]]:
        """The partition's (deadline, suggestion_id) heap; built by one table scan when missing.
        Entries may be stale (attributed, or the deadline moved): they are checked when popped."""
        heap = self._deadlines.get(partition)
        if heap is None:
            heap = []
            for key, raw in list(self._state.items()):
                if not str(key).startswith(MARK):
                    stored = self._pending.get(str(key)) or self._parse(raw)
                    self._pending[str(key)] = stored
                    due = deadline_ms(stored.pending, self._windows)
                    if stored.partition == partition and due is not None:
                        heap.append((due, str(key)))
            heapq.heapify(heap)
            self._deadlines[partition] = heap
        return heap

    async def _attribute_due(self, batch: Batch, partition: int, watermark_ms: int) -> None:
        """Attribute and emit every suggestion of `partition` whose deadline is before
        watermark - allowed lateness (no event for it can still be on time), then drop it.
        Suggestions without an offer have no deadline and wait."""
        cutoff = watermark_ms - self._windows.allowed_lateness_ms
        heap = self._heap(partition)
        while heap and heap[0][0] < cutoff:
            due, sid = heapq.heappop(heap)
            stored = self._load(batch, sid)
            if stored is None:
                continue  # already attributed
            if deadline_ms(stored.pending, self._windows) != due:
                continue  # an earlier offer moved the deadline: its own entry decides
            await self._emit(stored.session, stored.pending)
            batch.delete(partition, sid)
            self._pending.pop(sid, None)

    async def _emit(self, session_id: str, pending: PendingSuggestion) -> None:
        attributed = rewards(
            attribute(pending, self._windows), self._functions, self._clock(), self._out.producer
        )
        for reward in attributed:
            await self._out.emit(session_id.encode(), self._codec.encode("rewards", _rec(reward)))
            self._stats.rewards += 1


def _rec(reward: Reward) -> Mapping[str, Any]:
    return reward.to_record()


def _deadline(pending: PendingSuggestion | None, windows: Windows) -> int | None:
    return None if pending is None else deadline_ms(pending, windows)
