"""faust's aiokafka transport, with changelog highwaters asked of the broker and commits that
never pass what the workers applied.

Highwaters: under exactly_once, faust's table recovery takes each changelog partition's
highwater from aiokafka's `last_stable_offset`, which is only known once this consumer has
fetched from that partition. A partition it has not fetched yet (typically one taken over from
another worker in a rebalance) reads -1, so recovery either skips it, leaving its state empty
while the source offsets move on (Rewards lost, others emitted twice), or, with an offset kept
from the previous generation, stops the worker with a `ConsistencyError`. A two-worker crash run
(`python -m bench.pipeline --crash --workers 2`) hit both. `ListOffsets` under read_committed
(aiokafka's `end_offsets`, the consumer's isolation level) returns the last stable offset from
the broker whatever this consumer has fetched.

Commits (`commit_offset`): faust commits a partition up to the end of the first run of
consecutive offsets in its list of acked offsets, and counts the offsets its fetches jumped
over (a "gap") as acked. Two things go wrong with that. The gap's offsets enter the list
without entering faust's index of acked offsets, so when the joiner seeks back to them and they
are acked for real they are listed twice, and every repeat ends a run: the committed offset
crawled one or two offsets per commit, and a restart re-read from far back (a crash bench run
in three timed out). And a gap counts as acked although the joiner has not applied it (it is
waiting to re-read it): committing through it, a crash then loses those records for good. So
the list is taken as a set, and the commit never passes the offset after the partition's last
applied record (its offset marker), which the workers give the transport (`applied_next`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver
from faust.types import TP

# The offset after the last one applied of a source partition; None for a partition whose
# commits are not limited (not a joiner input).
AppliedNext = Callable[[TP], int | None]


def commit_offset(
    acked: list[int], committed: int | None, applied_next: int | None
) -> tuple[int | None, list[int]]:
    """(The offset to commit or None, the acked offsets left for later) from a partition's
    acked offsets (gaps included, repeats allowed), its committed offset (the next to read;
    None when unknown) and `applied_next` (None: no limit). The commit is the end of the first
    run of consecutive acked offsets, if the run starts at most one past the committed offset
    (faust's rule), and at most `applied_next`."""
    if not acked:
        return None, []
    ordered = sorted(set(acked))
    first = ordered[0]
    if committed is not None and first - committed > 1:
        return None, ordered  # offsets before the first acked one are still being processed
    end = first
    for offset in ordered:
        if offset != end:
            break
        end += 1
    if applied_next is not None:
        end = min(end, applied_next)
    if end <= first:
        return None, ordered
    left = [offset for offset in ordered if offset >= end]
    if committed is not None and end <= committed:
        return None, left
    return end, left


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        consumer: Any = self._ensure_consumer()
        offsets: Mapping[TP, int] = await consumer.end_offsets(partitions)
        return offsets


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _new_offset(self, tp: TP) -> int | None:
        """faust's bookkeeping in, `commit_offset` deciding (module docstring)."""
        acked: list[int] = self._acked[tp]
        if not acked:
            return None
        offsets = list(acked)
        gap = self._gap[tp]
        if gap:  # the offsets faust's fetches jumped over, up to the highest acked one
            top = max(offsets)
            for interval in gap.overlap(0, top + 1):
                offsets.extend(range(interval.begin, min(interval.end, top + 1)))
            gap.chop(0, top + 1)
        applied_next: AppliedNext | None = getattr(self.transport, "applied_next", None)
        limit = None if applied_next is None else applied_next(tp)
        offset, left = commit_offset(offsets, self._committed_offset[tp], limit)
        acked[:] = left
        index = self._acked_index[tp]
        index.clear()
        index.update(left)
        return offset


class _Transport(driver.Transport):
    Consumer = _Consumer
    applied_next: AppliedNext | None = None


def use_broker_highwaters(app: faust.App) -> _Transport:
    """Give `app` the transport above; call before the app's first topic (it creates the
    consumer transport). Set the returned transport's `applied_next` once the workers exist."""
    transport = _Transport(app.conf.broker_consumer, app)
    app.transport = transport
    return transport
