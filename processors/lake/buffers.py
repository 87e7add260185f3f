"""Per-partition buffers and when to turn them into files: pure logic, no Kafka, no I/O.

A buffer holds one partition's consecutive offsets [first, last] whose rows all have one
event-time hour, so each file sits in one `hour=` directory and per partition the files' ranges
tile the log. Offsets without a row (dead letters, tombstones, offsets compacted away) are
covered by the range of the buffer around them. A record of another hour closes the buffer
first; rows, bytes and wall-clock age close it too, and a byte budget over all buffers closes
the largest one, so memory stays bounded whatever the input rate.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from processors.lake.columns import Row
from processors.lake.errors import SinkConfigError

MIB = 1024 * 1024
# Python holds a buffered row in ~6x its Avro size (measured on SuggestionOffered: 183 wire
# bytes, ~1150 bytes of str/int/tuple objects); plus the offset and list slot per row.
MEMORY_PER_WIRE_BYTE = 6
ROW_OVERHEAD_BYTES = 64
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class RotationLimits:
    """When a buffer becomes a file. Bytes are estimated in-memory bytes (see above)."""

    max_rows: int = 50_000
    max_bytes: int = 64 * MIB
    max_age_s: float = 30.0  # wall time since the buffer's first offset: data becomes visible
    memory_budget_bytes: int = 512 * MIB  # all buffers together

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_bytes", "max_age_s", "memory_budget_bytes"):
            if getattr(self, name) <= 0:
                raise SinkConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.memory_budget_bytes < self.max_bytes:
            raise SinkConfigError(
                f"the memory budget ({self.memory_budget_bytes} bytes) is below one buffer's "
                f"max_bytes ({self.max_bytes}); raise the budget or lower max_bytes"
            )


def estimated_bytes(wire_bytes: int) -> int:
    """Estimated memory a buffered row of `wire_bytes` Avro bytes holds."""
    return wire_bytes * MEMORY_PER_WIRE_BYTE + ROW_OVERHEAD_BYTES


@dataclass(eq=False)
class PartitionBuffer:
    """Offsets [first, last] of one partition; `rows[i]` is the record at `offsets[i]`."""

    topic: str
    partition: int
    first: int
    opened_at_s: float  # monotonic clock
    placement_hour: int  # hour directory when there are no rows (dead letters only)
    last: int = -1
    hour: int | None = None  # event-time hour of the rows; None until the first row
    rows: list[Row] = field(default_factory=list)
    offsets: array[int] = field(default_factory=lambda: array("q"))
    bytes: int = 0
    dead_letters: int = 0

    @property
    def file_hour(self) -> int:
        """Hour directory of the file: the rows' hour, else where the first offset was made."""
        return self.placement_hour if self.hour is None else self.hour

    def covers(self, offset: int, *, dead_letter: bool = False) -> None:
        """Extend the range to `offset`, which holds no row (a dead letter or a tombstone)."""
        self.last = offset
        self.dead_letters += dead_letter

    def add(self, offset: int, row: Row, hour: int, size: int) -> None:
        """Append the row at `offset` of event-time `hour`, estimated at `size` bytes."""
        self.last = offset
        self.hour = hour
        self.rows.append(row)
        self.offsets.append(offset)
        self.bytes += size


def rotation_reason(buffer: PartitionBuffer, limits: RotationLimits, now_s: float) -> str | None:
    """Why `buffer` must become a file now ("rows", "bytes", "age"), or None."""
    if len(buffer.rows) >= limits.max_rows:
        return "rows"
    if buffer.bytes >= limits.max_bytes:
        return "bytes"
    if now_s - buffer.opened_at_s >= limits.max_age_s:
        return "age"
    return None


class BufferSet:
    """The open buffers of the assigned partitions and the next offset each one expects.

    Methods return *detached* buffers that must be written now, in the order given; after that
    the set never sees them again. A partition's next buffer starts where the previous ended,
    whether or not its file has been written yet.
    """

    def __init__(self, limits: RotationLimits) -> None:
        self.limits = limits
        self._open: dict[TopicPartition, PartitionBuffer] = {}
        self._next: dict[TopicPartition, int | None] = {}
        self.total_bytes = 0

    def assign(self, tp: TopicPartition, next_offset: int | None) -> None:
        """Own `tp` from `next_offset` (None: from the first offset that arrives)."""
        self._open.pop(tp, None)
        self._next[tp] = next_offset
        self._recount()

    def release(self, tp: TopicPartition) -> PartitionBuffer | None:
        """Stop owning `tp`; returns its open buffer (to write or to drop) if any."""
        self._next.pop(tp, None)
        buffer = self._open.pop(tp, None)
        self._recount()
        return buffer

    def owned(self) -> list[TopicPartition]:
        return list(self._next)

    def position(self, tp: TopicPartition) -> int | None:
        """The next offset `tp` expects (None if unknown or not owned)."""
        buffer = self._open.get(tp)
        return buffer.last + 1 if buffer is not None else self._next.get(tp)

    def is_stale(self, tp: TopicPartition, offset: int) -> bool:
        """True for a message below the expected position (before a seek took effect) or of a
        partition not owned: it must be ignored, or ranges would overlap."""
        if tp not in self._next:
            return True
        position = self.position(tp)
        return position is not None and offset < position

    def add_row(
        self, tp: TopicPartition, offset: int, row: Row, hour: int, size: int, now_s: float
    ) -> list[PartitionBuffer]:
        """Buffer a decoded row; returns buffers complete by hour change or rows/bytes."""
        ready: list[PartitionBuffer] = []
        buffer = self._open.get(tp)
        if buffer is not None and buffer.hour is not None and buffer.hour != hour:
            ready.append(self._detach(tp))
            buffer = None
        if buffer is None:
            buffer = self._start(tp, offset, hour, now_s)
        buffer.add(offset, row, hour, size)
        self.total_bytes += size
        if len(buffer.rows) >= self.limits.max_rows or buffer.bytes >= self.limits.max_bytes:
            ready.append(self._detach(tp))
        return ready

    def add_empty(
        self,
        tp: TopicPartition,
        offset: int,
        placement_hour: int,
        now_s: float,
        *,
        dead_letter: bool,
    ) -> None:
        """Cover an offset that holds no row (a dead letter or a tombstone)."""
        buffer = self._open.get(tp) or self._start(tp, offset, placement_hour, now_s)
        buffer.covers(offset, dead_letter=dead_letter)

    def due(self, now_s: float) -> list[PartitionBuffer]:
        """Buffers past their age, then the largest ones while the budget is exceeded."""
        ready = [
            self._detach(tp)
            for tp, buffer in list(self._open.items())
            if now_s - buffer.opened_at_s >= self.limits.max_age_s
        ]
        while self.total_bytes > self.limits.memory_budget_bytes and self._open:
            largest = max(self._open.values(), key=lambda b: b.bytes)
            ready.append(self._detach((largest.topic, largest.partition)))
        return ready

    def drain(self) -> list[PartitionBuffer]:
        """Every open buffer (on stop): the partitions stay owned."""
        return [self._detach(tp) for tp in list(self._open)]

    def _start(self, tp: TopicPartition, offset: int, hour: int, now_s: float) -> PartitionBuffer:
        expected = self._next.get(tp)
        # The range starts where the previous one ended, so offsets with no message at all
        # (compaction, transaction markers) are covered too.
        first = offset if expected is None else expected
        buffer = PartitionBuffer(tp[0], tp[1], first, now_s, hour, last=first - 1)
        self._open[tp] = buffer
        return buffer

    def _detach(self, tp: TopicPartition) -> PartitionBuffer:
        buffer = self._open.pop(tp)
        self._next[tp] = buffer.last + 1
        self.total_bytes -= buffer.bytes
        return buffer

    def _recount(self) -> None:
        self.total_bytes = sum(b.bytes for b in self._open.values())
