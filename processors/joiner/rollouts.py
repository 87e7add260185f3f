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
Offsets the consumer skipped are re-read before later ones apply, as in the joiner
(`processors.joiner.holes`).
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from processors.joiner.dead_letters import (
    late_dead_letter,
    rejected_dead_letter,
)
from processors.joiner.holes import DEFAULT_HOLE_ACCEPT_S, OffsetHoles
from processors.joiner.joiner import Outputs, SourceRecord, State, now_utc, offset_key
from processors.joiner.state import MARK, ChangelogState, DictState
from processors.joiner.stats import JoinerStats
from processors.rewards.rollouts import GroupPolicy, group_advantages, group_complete
from schemas.errors import SchemaError
from schemas.events import RolloutResult
from schemas.records import encode_time
from streams.errors import DecodeError
from streams.serde import AvroCodec


def clock_key(partition: int) -> str:
    return f"{MARK}now/{partition}"


class RolloutGrouper:
    """The rollout rewarder's per-event step over table-like state."""

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
        # Open (not yet emitted) group ids per partition, in memory only (missing: one table
        # scan); without it every rollout event would parse every group in the table.
        self._open: dict[int, set[str]] = {}
        # Emitted groups' entries per partition by emission time (built with `_open`).
        self._done: dict[int, list[tuple[int, str]]] = {}

    def forget_open_groups(self) -> None:
        """Drop the in-memory indexes (after a rebalance the table may hold other state)."""
        self._open.clear()
        self._done.clear()

    def _open_groups(self, partition: int) -> set[str]:
        groups = self._open.get(partition)
        if groups is None:
            groups, done = set(), []
            # Markers written before they carried "at" count from the clock's value now.
            clock = int(self._state.get(clock_key(partition)) or 0)
            for group_id, raw in list(self._state.items()):
                if not str(group_id).startswith(MARK):
                    doc = json.loads(raw)
                    if doc["p"] != partition:
                        continue
                    if doc["done"]:
                        done.append((int(doc.get("at", clock)), str(group_id)))
                    else:
                        groups.add(str(group_id))
            heapq.heapify(done)
            self._open[partition], self._done[partition] = groups, done
        return groups

    def _drop_done(self, partition: int, now_ms: int) -> None:
        """Forget emitted groups whose entry outlived the horizon."""
        self._open_groups(partition)  # builds the index when missing
        done = self._done[partition]
        while done and done[0][0] + self._horizon_ms <= now_ms:
            _, group_id = heapq.heappop(done)
            self._state.delete(partition, group_id)
            self._stats.expired_groups += 1

    async def on_event(self, rec: SourceRecord) -> None:
        """Apply one rollouts.results record; bad input becomes a dead letter."""
        marker = offset_key(rec.topic, rec.partition)
        if not self._holes.may_apply(rec.topic, rec.partition, rec.offset, self._state.get(marker)):
            return  # a replay after a crash, or offsets were skipped: re-read them first
        self._stats.saw_input()
        try:
            record = self._codec.decode(rec.platform_topic, rec.value)
            result = RolloutResult.from_record(record)
        except (DecodeError, SchemaError) as exc:
            cause = exc.cause if isinstance(exc, DecodeError) else "invalid_value"
            letter = rejected_dead_letter(cause, str(exc), rec.origin(), rec.platform_topic)
            self._stats.dead_letters += 1
            await self._out.dead_letter(rec, self._out.dlq_joiner, letter)
        else:
            await self._fold(rec, result)
        self._state.put(rec.partition, marker, rec.offset)

    def take_seeks(self) -> dict[tuple[str, int], int]:
        """Where to seek the consumer back to after the event (`OffsetHoles.take_seeks`)."""
        return self._holes.take_seeks()

    async def _fold(self, rec: SourceRecord, result: RolloutResult) -> None:
        raw = self._state.get(result.group_id)
        seen_ms = int(self._state.get(clock_key(rec.partition)) or 0)
        doc: dict[str, Any] = (
            {"p": rec.partition, "done": False, "t0": seen_ms, "r": []}
            if raw is None
            else json.loads(raw)
        )
        if doc["done"]:
            reason = f"rollout group {result.group_id} was already complete and emitted"
            letter = late_dead_letter(reason, result.to_record(), rec.origin(), rec.platform_topic)
            self._stats.late += 1
            await self._out.dead_letter(rec, self._out.dlq_late, letter)
            return
        if all(r["event_id"] != result.event_id for r in doc["r"]):
            open_groups = self._open_groups(rec.partition)  # built before this write
            doc["r"].append(result.to_record())
            self._state.put(rec.partition, result.group_id, json.dumps(doc))
            open_groups.add(result.group_id)
        now_ms = max(encode_time(result.event_time), seen_ms)
        self._state.put(rec.partition, clock_key(rec.partition), now_ms)
        await self._emit_complete(rec, now_ms)
        self._drop_done(rec.partition, now_ms)

    async def _emit_complete(self, rec: SourceRecord, now_ms: int) -> None:
        partition = rec.partition
        open_groups = self._open_groups(partition)
        for group_id in sorted(open_groups):
            doc = json.loads(self._state.get(group_id))
            results = [RolloutResult.from_record(r) for r in doc["r"]]
            if not group_complete(results, self._policy, now_ms, doc.get("t0", 0)):
                continue
            for reward in group_advantages(results, self._clock(), self._out.producer):
                value = self._codec.encode("rewards", reward.to_record())
                await self._out.emit(rec, str(group_id).encode(), value)
                self._stats.rewards += 1
            self._stats.groups += 1
            done = {"p": partition, "done": True, "at": now_ms, "r": []}
            self._state.put(partition, str(group_id), json.dumps(done))
            open_groups.discard(group_id)
            heapq.heappush(self._done[partition], (now_ms, str(group_id)))
