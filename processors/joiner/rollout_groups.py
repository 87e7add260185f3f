"""Groups RolloutResults by group_id and emits group-relative advantages when a group completes.

State (one table): `<group_id>` → JSON `{"p": partition, "done": bool, "t0": the partition's
clock when the group opened, "r": [RolloutResult records]}`; `\\x00now/<partition>` → the
partition's largest rollout event time (the clock `group_complete` times out against, from the
later of a group's oldest trial and its "t0": producers with other clocks share a partition, and
one that ran ahead must not time out every group that opens after it);
`\\x00off/<topic>/<partition>` → the last offset applied.
A finished group keeps a small `done` entry (`"at"`: the partition clock when it was emitted) so
a straggler goes to `dlq.late` instead of opening a second group; the entry is dropped once the
partition clock is `done_horizon_ms` past it, so the state stays bounded. A straggler after that
opens a group of its own, emitted at its timeout: its rollout is rewarded once (reward ids are
per rollout), only without peers (no clock-based lateness: producers' clocks differ).
Completion is checked when a rollout of the same partition arrives: a timed-out group is emitted
on the next rollout event of its partition (event time, no wall clock).
Records come in batches (`on_batch`), applied one by one with the same per-record decisions as a
batch of one, so what is emitted never depends on where a batch was cut; a group's document is
parsed once per batch and written once per batch (`Batch`), and the open groups' sizes and due
times are kept in memory, so a record no longer parses every open group of its partition.
Offsets the consumer skipped are re-read before later ones apply, as in the joiner
(`processors.joiner.holes`).
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from processors.joiner.dead_letters import (
    late_dead_letter,
    rejected_dead_letter,
)
from processors.joiner.holes import DEFAULT_HOLE_ACCEPT_S, OffsetHoles
from processors.joiner.joiner import Outputs, SourceRecord, State, now_utc, offset_key
from processors.joiner.state import MARK, Batch, ChangelogState, DictState
from processors.joiner.stats import JoinerStats
from processors.rewards.groups import GroupPolicy, group_advantages
from schemas.errors import SchemaError
from schemas.events import RolloutResult
from schemas.records import encode_time
from streams.errors import DecodeError
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC


def clock_key(partition: int) -> str:
    return f"{MARK}now/{partition}"


@dataclass
class OpenGroup:
    """What completion needs of a group not yet emitted: its distinct rollout ids, the event
    time of its oldest trial and the partition clock when it opened."""

    ids: set[str]
    oldest_ms: int
    opened_ms: int

    def due_ms(self, policy: GroupPolicy) -> int:
        """When the partition clock times the group out (`group_complete`)."""
        return max(self.oldest_ms, self.opened_ms) + policy.timeout_ms


class RolloutGrouper:
    """The rollout rewarder's per-record step over table-like state."""

    def __init__(
        self,
        state: ChangelogState | State,
        codec: AvroCodec,
        policy: GroupPolicy,
        outputs: Outputs,
        stats: JoinerStats,
        clock: Callable[[], datetime] = now_utc,
        done_horizon_ms: int | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        hole_accept_s: float = DEFAULT_HOLE_ACCEPT_S,
    ) -> None:
        """``done_horizon_ms``: how long (partition clock, event time) an emitted group's entry
        is kept to catch stragglers; default ten group timeouts. ``hole_accept_s`` and
        ``monotonic`` (its clock): see `processors.joiner.holes`."""
        self._state = state if isinstance(state, ChangelogState) else DictState(state)
        self._horizon_ms = done_horizon_ms or 10 * policy.timeout_ms
        self._codec = codec
        self._policy = policy
        self._out = outputs
        self._stats = stats
        self._clock = clock
        self._holes = OffsetHoles(stats, hole_accept_s, monotonic)
        # In memory only (missing for a partition: one table scan builds all three): the open
        # (not yet emitted) groups per partition, their due times (a heap, checked against the
        # open group when popped: entries of emitted groups stay in it), and the emitted groups'
        # entries by emission time.
        self._open: dict[int, dict[str, OpenGroup]] = {}
        self._due: dict[int, list[tuple[int, str]]] = {}
        self._done: dict[int, list[tuple[int, str]]] = {}

    def forget_open_groups(self) -> None:
        """Drop the in-memory indexes (after a rebalance the table may hold other state)."""
        self._open.clear()
        self._due.clear()
        self._done.clear()

    def _open_groups(self, partition: int) -> dict[str, OpenGroup]:
        """The partition's open groups; built from the table when missing, which must happen
        before this batch writes to the partition (`_apply` asks first)."""
        groups = self._open.get(partition)
        if groups is None:
            groups, due, done = {}, [], []
            # Markers written before they carried "at" count from the clock's value now.
            clock = int(self._state.get(clock_key(partition)) or 0)
            for group_id, raw in list(self._state.items()):
                if not str(group_id).startswith(MARK):
                    doc = json.loads(raw)
                    if doc["p"] != partition:
                        continue
                    if doc["done"]:
                        done.append((int(doc.get("at", clock)), str(group_id)))
                    elif doc["r"]:
                        results = [RolloutResult.from_record(r) for r in doc["r"]]
                        group = OpenGroup(
                            {r.rollout_id for r in results},
                            min(encode_time(r.event_time) for r in results),
                            int(doc.get("t0", 0)),
                        )
                        groups[str(group_id)] = group
                        due.append((group.due_ms(self._policy), str(group_id)))
            heapq.heapify(due)
            heapq.heapify(done)
            self._open[partition], self._due[partition] = groups, due
            self._done[partition] = done
        return groups

    def _drop_done(self, batch: Batch, partition: int, now_ms: int) -> None:
        """Forget emitted groups whose entry outlived the horizon."""
        done = self._done[partition]
        while done and done[0][0] + self._horizon_ms <= now_ms:
            _, group_id = heapq.heappop(done)
            batch.delete(partition, group_id)
            self._stats.expired_groups += 1

    async def on_event(self, rec: SourceRecord) -> None:
        """Apply one rollouts.results record (a batch of one)."""
        await self.on_batch([rec])

    async def on_batch(self, records: Sequence[SourceRecord]) -> None:
        """Apply rollouts.results records in order, then write the changed state once per key.
        Bad input becomes a dead letter."""
        batch = Batch(self._state)
        for rec in records:
            await self._apply(batch, rec)
        batch.flush()

    async def _apply(self, batch: Batch, rec: SourceRecord) -> None:
        marker = offset_key(rec.topic, rec.partition)
        if not self._holes.may_apply(rec.topic, rec.partition, rec.offset, batch.get(marker)):
            return  # a replay after a crash, or offsets were skipped: re-read them first
        self._stats.saw_input()
        self._open_groups(rec.partition)  # built before the batch writes to the partition
        try:
            record = self._codec.decode(rec.platform_topic, rec.value, plain=True)
            result = RolloutResult.from_record(record)
        except (DecodeError, SchemaError) as exc:
            cause = exc.cause if isinstance(exc, DecodeError) else "invalid_value"
            letter = rejected_dead_letter(cause, str(exc), rec.origin(), rec.platform_topic)
            self._stats.dead_letters += 1
            await self._out.dead_letter(rec, self._out.dlq_joiner, letter)
        else:
            await self._fold(batch, rec, result)
        batch.put(rec.partition, marker, rec.offset)

    def take_seeks(self) -> dict[tuple[str, int], int]:
        """Where to seek the consumer back to after the batch (`OffsetHoles.take_seeks`)."""
        return self._holes.take_seeks()

    async def _fold(self, batch: Batch, rec: SourceRecord, result: RolloutResult) -> None:
        partition = rec.partition
        doc = _document(batch.get(result.group_id))
        seen_ms = int(batch.get(clock_key(partition)) or 0)
        if doc is None:
            doc = {"p": partition, "done": False, "t0": seen_ms, "r": []}
        if doc["done"]:
            reason = f"rollout group {result.group_id} was already complete and emitted"
            letter = late_dead_letter(reason, result.to_record(), rec.origin(), rec.platform_topic)
            self._stats.late += 1
            await self._out.dead_letter(rec, self._out.dlq_late, letter)
            return
        if all(r["event_id"] != result.event_id for r in doc["r"]):
            doc["r"].append(result.to_record())
            batch.put(partition, result.group_id, doc)  # the dict: encoded once, at the flush
            self._track(partition, result, int(doc.get("t0", 0)))
        now_ms = max(encode_time(result.event_time), seen_ms)
        batch.put(partition, clock_key(partition), now_ms)
        await self._emit_complete(batch, rec, result.group_id, now_ms)
        self._drop_done(batch, partition, now_ms)

    def _track(self, partition: int, result: RolloutResult, opened_ms: int) -> None:
        """Count a new trial into its open group's summary and due time."""
        groups = self._open[partition]
        event_ms = encode_time(result.event_time)
        group = groups.get(result.group_id)
        if group is None:
            group = groups[result.group_id] = OpenGroup(set(), event_ms, opened_ms)
        elif event_ms >= group.oldest_ms:
            group.ids.add(result.rollout_id)
            return  # the due time stays
        group.ids.add(result.rollout_id)
        group.oldest_ms = event_ms
        heapq.heappush(self._due[partition], (group.due_ms(self._policy), result.group_id))

    async def _emit_complete(
        self, batch: Batch, rec: SourceRecord, group_id: str, now_ms: int
    ) -> None:
        """Emit every group of the partition complete at `now_ms`: the record's own group by
        its size, any by its due time (`group_complete`), in group id order."""
        partition = rec.partition
        groups, due = self._open[partition], self._due[partition]
        complete = set()
        own = groups.get(group_id)
        if own is not None and len(own.ids) >= self._policy.expected_size:
            complete.add(group_id)
        while due and due[0][0] <= now_ms:
            _, gid = heapq.heappop(due)
            group = groups.get(gid)
            if group is not None and group.due_ms(self._policy) <= now_ms:
                complete.add(gid)  # (else: the entry of an emitted group, or of an earlier one)
        for gid in sorted(complete):
            doc = _document(batch.get(gid))
            results = [RolloutResult.from_record(r) for r in doc["r"]] if doc else []
            for reward in group_advantages(results, self._clock(), self._out.producer):
                value = self._codec.encode(REWARDS_TOPIC, reward.to_record())
                await self._out.emit(rec, gid.encode(), value)
                self._stats.rewards += 1
            self._stats.groups += 1
            batch.put(partition, gid, {"p": partition, "done": True, "at": now_ms, "r": []})
            del groups[gid]
            heapq.heappush(self._done[partition], (now_ms, gid))


def _document(stored: Any) -> dict[str, Any] | None:
    """A group's document: as written earlier in the batch (a dict), or parsed from the
    table's JSON; None when there is none."""
    if stored is None or isinstance(stored, dict):
        return stored
    doc: dict[str, Any] = json.loads(stored)
    return doc
