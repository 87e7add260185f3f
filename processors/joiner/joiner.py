"""The joiner's per-event steps over table-like state, free of faust (unit-testable with dicts).

`RewardJoiner.on_event` is called once per source record; it decodes, dead-letters, folds the
event into its suggestions' pending state, advances the partition's watermark and attributes
every suggestion of that partition whose deadline fell behind watermark - allowed lateness.
All reward math is `processors.rewards`'; this module only moves state and records.

State layout (one table, so one changelog partition holds all of a partition's state in
order): `<suggestion_id>` → JSON `{"p": partition, "k": session_id, "s": PendingSuggestion
JSON}` (one small value per suggestion, so a write costs one suggestion, not a session);
`\\x00wm/<partition>` → the watermark (epoch ms); `\\x00off/<topic>/<partition>` → the last
source offset applied. Due suggestions are found through an in-memory heap of deadlines per
partition, rebuilt from the table on first use and after a rebalance. The offset marker is
written after the state it covers, so after a crash a replayed record at or below it is
skipped: state updates apply once even though Kafka offsets are committed at least once.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from processors.joiner.dead_letters import late_dead_letter, rejected_dead_letter
from processors.joiner.stats import JoinerStats
from processors.lake.dead_letters import DeadLetter, Origin
from processors.rewards.attribution import (
    PendingSuggestion,
    Watermark,
    Windows,
    add,
    attribute,
    deadline_ms,
    is_late,
    rewards,
    suggestion_ids_of,
)
from processors.rewards.functions import RewardFunction
from schemas.catalog import TOPIC_VALUE_SCHEMAS
from schemas.errors import SchemaError
from schemas.events import EVENT_TYPES, Event, Reward
from schemas.records import encode_time
from streams.serde import AvroCodec, DecodeError

MARK = "\x00"  # prefix of bookkeeping keys; no session id starts with NUL

Emit = Callable[[bytes, bytes], Awaitable[None]]  # (key, Avro value) to the rewards topic
SendDeadLetter = Callable[[str, DeadLetter], Awaitable[None]]  # (dlq topic, record)
State = MutableMapping[str, Any]


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


def watermark_key(partition: int) -> str:
    return f"{MARK}wm/{partition}"


def now_utc() -> datetime:
    return datetime.now(UTC)


class RewardJoiner:
    """Joins the four telemetry topics per suggestion and emits one Reward per function."""

    def __init__(
        self,
        state: State,
        codec: AvroCodec,
        functions: Sequence[RewardFunction],
        windows: Windows,
        outputs: Outputs,
        stats: JoinerStats,
        clock: Callable[[], datetime] = now_utc,
    ) -> None:
        self._state = state
        self._codec = codec
        self._functions = tuple(functions)
        self._windows = windows
        self._out = outputs
        self._stats = stats
        self._clock = clock
        # Deadlines per partition, in memory only (missing: rebuild from the table).
        self._deadlines: dict[int, list[tuple[int, str]]] = {}

    def forget_deadlines(self) -> None:
        """Drop the in-memory deadline index (after a rebalance the table may hold new state)."""
        self._deadlines.clear()

    async def on_event(self, rec: SourceRecord) -> None:
        """Apply one source record. Never raises for bad input: it becomes a dead letter."""
        marker = offset_key(rec.topic, rec.partition)
        applied = self._state.get(marker)
        if applied is not None and rec.offset <= int(applied):
            return  # a replay after a crash: its effects are already in the table
        self._stats.saw_input()
        event = await self._decode(rec)
        if event is not None:
            await self._fold(rec, event)
        self._state[marker] = rec.offset

    async def _decode(self, rec: SourceRecord) -> Event | None:
        try:
            record = self._codec.decode(rec.platform_topic, rec.value)
            return EVENT_TYPES[TOPIC_VALUE_SCHEMAS[rec.platform_topic]].from_record(record)
        except DecodeError as exc:
            letter = rejected_dead_letter(exc.cause, str(exc), rec.origin(), rec.platform_topic)
        except SchemaError as exc:
            letter = rejected_dead_letter(
                "invalid_value", str(exc), rec.origin(), rec.platform_topic
            )
        self._stats.dead_letters += 1
        await self._out.dead_letter(self._out.dlq_joiner, letter)
        return None

    async def _fold(self, rec: SourceRecord, event: Event) -> None:
        event_ms = encode_time(event.event_time)
        stored = self._state.get(watermark_key(rec.partition))
        watermark = Watermark(None if stored is None else int(stored))
        if is_late(event_ms, watermark.value_ms, self._windows):
            await self._late(rec, event, event_ms, watermark.value_ms or 0)
            return
        ids = suggestion_ids_of(event)
        session_id = str(getattr(event, "session_id", ""))
        if ids and session_id:
            self._add(rec.partition, session_id, ids, event)
        watermark.observe(event_ms)
        if watermark.value_ms != stored and watermark.value_ms is not None:
            self._state[watermark_key(rec.partition)] = watermark.value_ms
        if watermark.value_ms is not None:
            await self._attribute_due(rec.partition, watermark.value_ms)

    async def _late(self, rec: SourceRecord, event: Event, event_ms: int, wm_ms: int) -> None:
        reason = (
            f"event_time {event_ms} ms is {wm_ms - event_ms} ms behind the watermark {wm_ms} ms "
            f"of partition {rec.partition}, more than the allowed lateness of "
            f"{self._windows.allowed_lateness_ms} ms"
        )
        letter = late_dead_letter(reason, event.to_record(), rec.origin(), rec.platform_topic)
        self._stats.late += 1
        await self._out.dead_letter(self._out.dlq_late, letter)

    def _add(self, partition: int, session_id: str, ids: Sequence[str], event: Event) -> None:
        for sid in ids:
            raw = self._state.get(sid)
            before = None if raw is None else PendingSuggestion.from_json(json.loads(raw)["s"])
            pending = add(before, event)
            self._state[sid] = json.dumps({"p": partition, "k": session_id, "s": pending.to_json()})
            due = deadline_ms(pending, self._windows)
            heap = self._deadlines.get(partition)
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
                    doc = json.loads(raw)
                    due = deadline_ms(PendingSuggestion.from_json(doc["s"]), self._windows)
                    if doc["p"] == partition and due is not None:
                        heap.append((due, str(key)))
            heapq.heapify(heap)
            self._deadlines[partition] = heap
        return heap

    async def _attribute_due(self, partition: int, watermark_ms: int) -> None:
        """Attribute and emit every suggestion of `partition` whose deadline is before
        watermark - allowed lateness (no event for it can still be on time), then drop it.
        Suggestions without an offer have no deadline and wait."""
        cutoff = watermark_ms - self._windows.allowed_lateness_ms
        heap = self._heap(partition)
        while heap and heap[0][0] < cutoff:
            due, sid = heapq.heappop(heap)
            raw = self._state.get(sid)
            if raw is None:
                continue  # already attributed
            doc = json.loads(raw)
            pending = PendingSuggestion.from_json(doc["s"])
            if deadline_ms(pending, self._windows) != due:
                continue  # an earlier offer moved the deadline: its own entry decides
            await self._emit(str(doc["k"]), pending)
            del self._state[sid]

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
