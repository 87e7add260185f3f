"""The joiner's steps over table-like state, free of faust (unit-testable with dicts).

`RewardJoiner.on_batch` applies source records in order: it decodes, dead-letters, folds each
event into its suggestions' pending state, advances its input's watermark and attributes every
suggestion of that partition whose deadline fell behind the partition's attribution watermark -
allowed lateness; then it writes each changed key once (`Batch`).

Watermarks are kept per input topic and partition, as in Flink: an event is late only against
its own topic's watermark (within a topic partition events arrive in event-time order), and a
partition's attribution watermark is the minimum over its inputs, leaving out idle inputs. An
input is idle when it has nothing left to read (`caught_up`: every record up to the consumer's
high watermark applied) *and* has not advanced for `idle_s` of wall clock. Wall clock alone is
not enough: after a restart or a rebalance, a topic whose backlog the consumer has not reached
yet looks exactly like a silent one, and attributing without it scores an accepted suggestion
as ignored (the crash bench's one wrong Reward). A fetch that brings one topic far ahead of
another (a backlog, a slow topic) therefore delays attribution instead of sending the slower
topic's events to dlq.late or attributing before their outcomes.
All reward math is `processors.rewards`'; this module only moves state and records.

State layout (one table, so one changelog partition holds all of a partition's state in
order): `<suggestion_id>` → JSON `{"p": partition, "k": session_id, "e": [[platform_topic,
base64 Avro value], ...]}` (the suggestion's source records; see `state.StoredSuggestion`);
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
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from contracts.dead_letters import DeadLetter, Origin, dead_letter
from contracts.errors import RecordRejected
from processors.joiner.dead_letters import (
    ORPHAN,
    STAGE,
    late_dead_letter,
    rejected_dead_letter,
)
from processors.joiner.holes import DEFAULT_HOLE_ACCEPT_S, OffsetHoles
from processors.joiner.state import MARK, Batch, ChangelogState, DictState, StoredSuggestion
from processors.joiner.stats import JoinerStats
from processors.rewards.attribution import (
    PendingSuggestion,
    Watermark,
    Windows,
    combined_watermark,
    is_late,
)
from processors.rewards.errors import RewardError
from processors.rewards.functions import RewardFunction
from processors.rewards.joins import Join, SuggestionJoin
from schemas.errors import SchemaError
from schemas.events import EVENT_TYPES, Event, Reward
from schemas.records import encode_time
from streams.errors import DecodeError
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC, TOPIC_VALUE_SCHEMAS

# Outputs name the source record they derive from: the adapter writes them in the Kafka
# transaction of that record's partition (processors/joiner/outbox.py).
Emit = Callable[["SourceRecord", bytes, bytes], Awaitable[None]]  # (source, key, Avro value)
SendDeadLetter = Callable[
    ["SourceRecord", str, DeadLetter], Awaitable[None]
]  # (source, dlq, record)
State = MutableMapping[str, Any]  # the rollout grouper's table
# (source topic, partition, last offset applied or None) → True when the consumer holds nothing
# of that input partition beyond it (nothing fetched and unapplied, nothing left on the broker).
CaughtUp = Callable[[str, int, "int | None"], bool]


class SourceRecord(NamedTuple):
    """One record read from a source topic; `platform_topic` names its schema. (A named
    tuple: one is built per record read, and a frozen dataclass costs ~5x as much.)"""

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


DEFAULT_IDLE_S = 2.0


def watermark_key(topic: str, partition: int) -> str:
    return f"{MARK}wm/{topic}/{partition}"


def now_utc() -> datetime:
    return datetime.now(UTC)


class RewardJoiner:
    """Joins its inputs per anchor id and emits the Rewards of each anchor once it is due: the
    four telemetry topics per suggestion (one Reward per function) by default, or another
    :class:`processors.rewards.joins.Join` (served completions and their feedback)."""

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
        caught_up: CaughtUp | None = None,
        sources: Mapping[str, str] | None = None,
        hole_accept_s: float = DEFAULT_HOLE_ACCEPT_S,
        join: Join | None = None,
    ) -> None:
        """``idle_s``: wall seconds without progress after which a *caught-up* input stops
        holding back the partition's attribution watermark (``monotonic`` reads that clock).
        ``caught_up``: asks the consumer whether an input partition has records left (None:
        always caught up, for tools and tests without a consumer). ``sources``: platform topic
        → the source topic read for it (default: the same name). ``hole_accept_s``: see
        `processors.joiner.holes`. ``join``: what is joined (default: suggestions, scored by
        ``functions`` within ``windows``; a given join brings its own windows)."""
        self._join: Join = join or SuggestionJoin(tuple(functions), windows)
        self._state = state if isinstance(state, ChangelogState) else DictState(state)
        self._idle_s, self._monotonic = idle_s, monotonic
        self._caught_up = caught_up or (lambda _topic, _partition, _offset: True)
        self._sources = {topic: topic for topic in self._join.topics} | dict(sources or {})
        # (topic, partition) → monotonic time its watermark last advanced (memory only); an
        # input not seen moving since this process started counts from the start.
        self._advanced: dict[tuple[str, int], float] = {}
        self._started = monotonic()
        self._codec = codec
        self._windows = self._join.windows  # the allowed lateness
        self._out = outputs
        self._stats = stats
        self._clock = clock
        self._holes = OffsetHoles(stats, hole_accept_s, monotonic)
        # Deadlines per partition, in memory only (missing: rebuild from the table).
        self._deadlines: dict[int, list[tuple[int, str]]] = {}
        # Orphans (events of a suggestion whose offer has not come) per partition, by their
        # earliest event time; built with the deadlines.
        self._orphans: dict[int, list[tuple[int, str]]] = {}
        # Done markers per partition by their offer's event time; built with the deadlines.
        self._done: dict[int, list[tuple[int, str]]] = {}
        # Decoded stored suggestions (a cache: the table is the truth). An entry stands in for
        # the table's value only while that value is the document it was read from or written
        # as: faust's recovery and standby reads write the table behind the joiner's back (a
        # batch of another partition, run while a taken-over partition was still recovering,
        # once cached its half-restored state, and an accepted suggestion lost its outcome).
        self._pending: dict[str, StoredSuggestion] = {}
        self._event_types = {
            topic: EVENT_TYPES[schema] for topic, schema in TOPIC_VALUE_SCHEMAS.items()
        }
        self._topic_of = {schema: topic for topic, schema in TOPIC_VALUE_SCHEMAS.items()}

    def forget_deadlines(self) -> None:
        """Drop the in-memory indexes (after a rebalance the table may hold other state), and
        restart the idle clocks: an input of a partition taken over has not been seen moving."""
        self._advanced.clear()
        self._started = self._monotonic()
        self._deadlines.clear()
        self._orphans.clear()
        self._done.clear()
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
        last: dict[int, SourceRecord] = {}  # partition → its last record applied in the batch
        for rec in records:
            marker = offset_key(rec.topic, rec.partition)
            if not self._holes.may_apply(rec.topic, rec.partition, rec.offset, batch.get(marker)):
                continue  # a replay after a crash, or offsets were skipped: re-read them first
            self._stats.saw_input()
            event = await self._decode(rec)
            # (The batch writes markers after the state they cover, whatever the order here.)
            batch.put(rec.partition, marker, rec.offset)
            if event is not None:
                await self._fold(batch, rec, event)
            last[rec.partition] = rec
        # Attribution and orphan expiry once per partition per batch, after all its records
        # (each is applied, so its input is caught up to it); they were a quarter of the CPU
        # per record. The Rewards derive from the partition's last record (its transaction).
        for rec in last.values():
            await self._settle(batch, rec)
        batch.flush()

    async def on_tick(self, partitions: Sequence[int]) -> None:
        """Attribute what became due in `partitions` without a record arriving: an input goes
        idle by the wall clock (and once the consumer has nothing more of it), so a partition
        whose last batch came while an input still held attribution back would otherwise wait
        for its next record — after a restart that re-read only the ticks, for ever (the joiner
        crash test's 320 missing Rewards). The adapter calls it between batches; the outputs
        derive from the partition's anchor input (its transaction)."""
        batch = Batch(self._state)
        anchor = self._join.topics[0]
        source = self._sources.get(anchor, anchor)
        for partition in partitions:
            await self._settle(batch, SourceRecord(source, anchor, partition, -1, None, b""))
        batch.flush()

    async def _settle(self, batch: Batch, rec: SourceRecord) -> None:
        """Attribution, orphan expiry and done-marker expiry for `rec`'s partition, the
        outputs deriving from `rec`."""
        partition = rec.partition
        attribution_ms = self._attribution_watermark(batch, partition)
        if attribution_ms is not None:
            await self._attribute_due(batch, rec, attribution_ms)
        await self._expire_orphans(batch, rec)
        self._drop_done(batch, partition)

    def take_seeks(self) -> dict[tuple[str, int], int]:
        """Where to seek the consumer back to after the batch (`OffsetHoles.take_seeks`)."""
        return self._holes.take_seeks()

    async def _decode(self, rec: SourceRecord) -> Event | None:
        try:
            record = self._codec.decode(rec.platform_topic, rec.value, plain=True)
            return self._event_types[rec.platform_topic].from_record(record)
        except DecodeError as exc:
            letter = rejected_dead_letter(exc.cause, str(exc), rec.origin(), rec.platform_topic)
        except SchemaError as exc:
            letter = rejected_dead_letter(
                "invalid_value", str(exc), rec.origin(), rec.platform_topic
            )
        self._stats.dead_letters += 1
        await self._out.dead_letter(rec, self._out.dlq_joiner, letter)
        return None

    async def _fold(self, batch: Batch, rec: SourceRecord, event: Event) -> None:
        event_ms = encode_time(event.event_time)
        key = watermark_key(rec.platform_topic, rec.partition)
        stored = batch.get(key)
        watermark = Watermark(None if stored is None else int(stored))
        if is_late(event_ms, watermark.value_ms, self._windows):
            await self._late(rec, event, event_ms, watermark.value_ms or 0)
            return
        ids = self._join.ids_of(event)
        session_id = str(getattr(event, "session_id", ""))
        self._heap(rec.partition)  # built before this batch's writes to it (it scans the table)
        if ids and session_id:
            self._add(batch, rec, session_id, ids, event, event_ms)
        watermark.observe(event_ms)
        if watermark.value_ms != stored and watermark.value_ms is not None:
            batch.put(rec.partition, key, watermark.value_ms)
            self._advanced[(rec.platform_topic, rec.partition)] = self._monotonic()

    def _attribution_watermark(self, batch: Batch, partition: int) -> int | None:
        """The minimum of the partition's input watermarks, idle inputs left out."""
        now = self._monotonic()
        marks: dict[str, int] = {}
        idle: set[str] = set()
        for topic in self._join.topics:
            value = batch.get(watermark_key(topic, partition))
            if value is None:
                continue
            marks[topic] = int(value)
            # An input that has not moved since a restart goes idle idle_s after the start, and
            # only once the consumer has nothing more of it: the wall clock cannot tell a quiet
            # topic from one whose backlog has not been fetched yet.
            quiet = now - self._advanced.get((topic, partition), self._started) > self._idle_s
            if quiet and self._input_caught_up(batch, topic, partition):
                idle.add(topic)
        return combined_watermark(marks, idle)

    def _input_caught_up(self, batch: Batch, topic: str, partition: int) -> bool:
        source = self._sources.get(topic, topic)
        applied = batch.get(offset_key(source, partition))
        return self._caught_up(source, partition, None if applied is None else int(applied))

    async def _late(self, rec: SourceRecord, event: Event, event_ms: int, wm_ms: int) -> None:
        reason = (
            f"event_time {event_ms} ms is {wm_ms - event_ms} ms behind the watermark {wm_ms} ms "
            f"of {rec.platform_topic} partition {rec.partition}, more than the allowed lateness of "
            f"{self._windows.allowed_lateness_ms} ms"
        )
        letter = late_dead_letter(reason, event.to_record(), rec.origin(), rec.platform_topic)
        self._stats.late += 1
        await self._out.dead_letter(rec, self._out.dlq_late, letter)

    def _load(self, batch: Batch, sid: str) -> StoredSuggestion | None:
        """The stored suggestion; None when there is none."""
        raw = batch.get(sid)
        if raw is None:
            self._pending.pop(sid, None)
            return None
        if isinstance(raw, StoredSuggestion):
            return raw
        return self._decoded(sid, raw)

    def _decoded(self, sid: str, raw: str) -> StoredSuggestion:
        """The table's document `raw` for `sid`, decoded once while it stays the same."""
        cached = self._pending.get(sid)
        if cached is None or not cached.stored_as(raw):
            cached = self._pending[sid] = StoredSuggestion.read(raw, self._parse(raw))
        return cached

    def _parse(self, raw: str) -> StoredSuggestion:
        """A stored JSON document (either layout) as a `StoredSuggestion`."""
        doc = json.loads(raw)
        if "d" in doc:
            return StoredSuggestion(int(doc["p"]), str(doc["k"]), None, (), done_ms=int(doc["d"]))
        if "s" in doc:
            pending = PendingSuggestion.from_json(doc["s"])
            return StoredSuggestion(int(doc["p"]), str(doc["k"]), pending, None)
        events = tuple((str(t), base64.b64decode(v)) for t, v in doc["e"])
        folded: Any = None
        for topic, value in events:
            record = self._codec.decode(topic, value, plain=True)
            folded = self._join.add(folded, self._event_types[topic].from_record(record))
        if folded is None:
            raise RewardError(f"stored suggestion state {raw[:80]!r} holds no events")
        return StoredSuggestion(int(doc["p"]), str(doc["k"]), folded, events)

    def _add(
        self,
        batch: Batch,
        rec: SourceRecord,
        session_id: str,
        ids: Sequence[str],
        event: Event,
        event_ms: int,
    ) -> None:
        for sid in ids:
            stored = self._load(batch, sid)
            if stored is not None and stored.done_ms is not None:
                self._stats.duplicates += 1  # a re-send of an attributed suggestion's event
                continue
            before = None if stored is None else stored.pending
            pending = self._join.add(before, event)
            if pending == before:
                continue  # a duplicate: nothing changed
            source = (rec.platform_topic, rec.value)
            if stored is None:
                new = StoredSuggestion(rec.partition, session_id, pending, (source,))
            else:
                new = stored.adding(rec.partition, session_id, pending, source)
            self._pending[sid] = new
            batch.put(rec.partition, sid, new)
            if rec.partition in self._deadlines:
                self._index(rec.partition, sid, before, pending, event_ms)

    def _index(self, partition: int, sid: str, before: Any, now: Any, event_ms: int | None) -> None:
        """Push the anchor's new deadline, or an orphan's event time: `event_ms`, that of the
        event just added (None: index `now` as loaded, by its earliest event). An orphan gets
        an entry per event, not a recomputed earliest time (that scan of its held events, twice
        per event, was a tenth of the joiner's batch step): the entry of its earliest event is
        among them, and `_expire_orphans` skips the others as stale."""
        join = self._join
        due = join.deadline_ms(now)
        if due is not None:
            if before is None or due != join.deadline_ms(before):
                heapq.heappush(self._deadlines[partition], (due, sid))
            return
        first = join.first_event_ms(now) if event_ms is None else event_ms
        if first is not None:
            heapq.heappush(self._orphans[partition], (first, sid))

    def _heap(self, partition: int) -> list[tuple[int, str]]:
        """The partition's (deadline, suggestion_id) heap; built by one table scan when missing.
        Entries may be stale (attributed, or the deadline moved): they are checked when popped."""
        heap = self._deadlines.get(partition)
        if heap is None:
            heap, self._orphans[partition], self._done[partition] = [], [], []
            self._deadlines[partition] = heap
            for key, raw in list(self._state.items()):
                if not str(key).startswith(MARK):
                    stored = self._decoded(str(key), raw)
                    if stored.partition != partition:
                        continue
                    if stored.done_ms is not None:
                        self._done[partition].append((stored.done_ms, str(key)))
                    else:
                        self._index(partition, str(key), None, stored.pending, None)
            heapq.heapify(self._done[partition])
        return heap

    async def _attribute_due(self, batch: Batch, rec: SourceRecord, watermark_ms: int) -> None:
        """Attribute and emit every suggestion of `partition` whose deadline is before
        watermark - allowed lateness (no event for it can still be on time), then drop it.
        `rec`: the record that moved the watermark (its partition is the suggestions'; the
        Rewards derive from it)."""
        partition = rec.partition
        cutoff = watermark_ms - self._windows.allowed_lateness_ms
        heap = self._heap(partition)
        offers_ms = self._offers_watermark(batch, partition)
        while heap and heap[0][0] < cutoff:
            due, sid = heapq.heappop(heap)
            stored = self._load(batch, sid)
            if stored is None or stored.done_ms is not None:
                continue  # already attributed
            if self._join.deadline_ms(stored.pending) != due:
                continue  # an earlier offer moved the deadline: its own entry decides
            await self._emit(rec, stored.session, stored.pending)
            self._pending.pop(sid, None)
            offer_ms = self._join.anchor_ms(stored.pending)
            assert offer_ms is not None  # it has a deadline
            if is_late(offer_ms, offers_ms, self._windows):
                batch.delete(partition, sid)  # a re-sent offer would be late: no marker needed
            else:  # the offers input is behind (idle): a re-sent offer would be on time
                done = StoredSuggestion(partition, stored.session, None, (), offer_ms)
                batch.put(partition, sid, done)
                heapq.heappush(self._done[partition], (offer_ms, sid))

    def _offers_watermark(self, batch: Batch, partition: int) -> int | None:
        """The watermark of the anchors' input (offers, completions)."""
        value = batch.get(watermark_key(self._join.topics[0], partition))
        return None if value is None else int(value)

    def _drop_done(self, batch: Batch, partition: int) -> None:
        """Drop the done markers whose re-sent offer would now be late against the partition's
        offers watermark (dlq.late then keeps it out): the markers live only while the offers
        input lags the others, so the state stays bounded by event time."""
        heap = self._done.get(partition)
        offers_ms = self._offers_watermark(batch, partition)
        while heap and is_late(heap[0][0], offers_ms, self._windows):
            offer_ms, sid = heapq.heappop(heap)
            stored = self._load(batch, sid)
            if stored is not None and stored.done_ms == offer_ms:
                batch.delete(partition, sid)
                self._pending.pop(sid, None)

    async def _expire_orphans(self, batch: Batch, rec: SourceRecord) -> None:
        """Drop the orphans (a suggestion's outcome, edits or test runs, but no offer) whose
        offer could no longer join them: an offer precedes its other events, so once the
        earliest of them is late against the partition's *offers* watermark, so is the offer.
        No Reward; each of its events goes to dlq.late (cause `orphan`, the reason in
        `flywheel.error`), counted in `stats.expired`. Orphans wait while offers do not move.
        `rec`: the record that moved the watermark (the dead letters go in its transaction)."""
        partition = rec.partition
        offers_ms = self._offers_watermark(batch, partition)
        heap = self._orphans.get(partition)
        while heap and offers_ms is not None and is_late(heap[0][0], offers_ms, self._windows):
            first, sid = heapq.heappop(heap)
            stored = self._load(batch, sid)
            if stored is None or stored.done_ms is not None:
                continue  # attributed
            if self._join.anchor_ms(stored.pending) is not None:
                continue  # its offer came: the deadline heap has it
            if self._join.first_event_ms(stored.pending) != first:
                continue  # an earlier event moved it: its own entry decides
            self._stats.expired += 1
            await self._orphan_letters(rec, sid, stored, offers_ms)
            batch.delete(partition, sid)
            self._pending.pop(sid, None)

    async def _orphan_letters(
        self, rec: SourceRecord, sid: str, stored: StoredSuggestion, offers_ms: int
    ) -> None:
        """One dlq.late record per event held for an expired orphan, in its original bytes
        (re-encoded for state of the previous layout, which kept the decoded events only)."""
        reason = (
            f"no offer for suggestion {sid} arrived: its earliest event is more than the allowed "
            f"lateness of {self._windows.allowed_lateness_ms} ms behind the offers watermark "
            f"{offers_ms} ms of partition {rec.partition}"
        )
        key = stored.session.encode()
        held = stored.events
        if held is None:
            held = tuple(
                (topic, self._codec.encode(topic, e.to_record()))
                for e in self._join.held_events(stored.pending)
                for topic in (self._topic_of[e.SCHEMA_NAME],)
            )
        for topic, value in held:
            # Held in the joiner's state, so its offset is not known (-1).
            origin = Origin(self._sources.get(topic, topic), rec.partition, -1, key, value)
            letter = dead_letter(
                RecordRejected(ORPHAN, reason),
                origin,
                stage=STAGE,
                carries_code_text=False,  # an orphan holds no offer, the one code-text event
            )
            await self._out.dead_letter(rec, self._out.dlq_late, letter)

    async def _emit(self, rec: SourceRecord, session_id: str, pending: Any) -> None:
        for reward in self._join.rewards(pending, self._clock(), self._out.producer):
            await self._out.emit(
                rec, session_id.encode(), self._codec.encode(REWARDS_TOPIC, _rec(reward))
            )
            self._stats.rewards += 1


def _rec(reward: Reward) -> Mapping[str, Any]:
    return reward.to_record()
