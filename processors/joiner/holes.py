"""Offsets the consumer skipped, re-read before anything after them is applied.

faust's consumer once skipped a record (a rebalance in the crash bench: record n never reached
the agent, n+1 on did, and faust committed past n: a suggestion lost without a trace), so the
workers' offset markers, not the consumer's position, say what is applied. A record beyond the
next offset to apply asks for a seek back to that offset, and the partition's later records
are skipped until it arrives. Offsets that hold no record at all (transaction markers of a
transactionally written input, a log whose start passed them) never arrive: ``accept_s`` after
the first seek the hole is accepted, counted and logged, and the worker goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from processors.joiner.stats import JoinerStats

# How long skipped offsets may stay missing after a seek back before they are taken to hold no
# records.
DEFAULT_HOLE_ACCEPT_S = 30.0
log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class OffsetHoles:
    """Per source partition: the first offset missing, when it was first seen, when a seek back
    to it was last asked for; and the seeks the adapter still has to make."""

    def __init__(
        self,
        stats: JoinerStats,
        accept_s: float = DEFAULT_HOLE_ACCEPT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stats = stats
        self._accept_s = accept_s
        self._monotonic = monotonic
        self._holes: dict[TopicPartition, tuple[int, float, float]] = {}
        self._seeks: dict[TopicPartition, int] = {}

    def may_apply(self, topic: str, partition: int, offset: int, applied: Any) -> bool:
        """Whether the record at ``offset`` is to be applied, from ``applied``: the partition's
        offset marker (its last applied offset, None before the first). No for a replay after
        a crash (its effects are already in the state); no while offsets before it are missing;
        yes when it is next, or once a hole is accepted."""
        last = None if applied is None else int(applied)
        if last is not None and offset <= last:
            return False  # a replay
        key = (topic, partition)
        if last is None or offset == last + 1:
            self._holes.pop(key, None)
            return True
        expected, now = last + 1, self._monotonic()
        hole = self._holes.get(key)
        if hole is None or hole[0] != expected:
            self._holes[key] = (expected, now, now)
            self._seeks[key] = expected
            self._stats.refetches += 1
            return False
        _, since, sought = hole
        if now - since >= self._accept_s:
            del self._holes[key]
            self._stats.holes += 1
            log.warning(
                "offsets %d..%d of %s partition %d never arrived after a seek back %.0f s ago: "
                "they hold no records (transaction markers, or a log start that passed them); "
                "going on from %d",
                expected, offset - 1, topic, partition, now - since, offset,
            )  # fmt: skip
            return True
        if now - sought >= 1.0:  # a seek, then at most one a second while the hole stays
            self._holes[key] = (expected, since, now)
            self._seeks[key] = expected
        return False

    def take_seeks(self) -> dict[TopicPartition, int]:
        """The source partitions to re-read and the offset to re-read from (the first offset
        not applied): the adapter seeks the consumer there after the batch or event."""
        seeks, self._seeks = self._seeks, {}
        return seeks
