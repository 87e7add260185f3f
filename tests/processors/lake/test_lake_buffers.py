"""Buffering and rotation as pure logic: hours, rows, bytes, age, the budget, dead letters."""

from __future__ import annotations

import pytest

from processors.lake.buffers import (
    BufferSet,
    PartitionBuffer,
    RotationLimits,
    estimated_bytes,
    rotation_reason,
)
from processors.lake.errors import SinkConfigError

TP = ("t", 0)
HOUR = 490_000  # some hour since the epoch


def limits(**overrides: float) -> RotationLimits:
    base = {"max_rows": 100, "max_bytes": 10_000, "max_age_s": 30.0, "memory_budget_bytes": 50_000}
    base.update(overrides)
    return RotationLimits(**base)  # type: ignore[arg-type]  # test-chosen values


def fill(buffers: BufferSet, tp: tuple[str, int], offsets: range, *, hour: int = HOUR,
         size: int = 10, now: float = 0.0) -> list[PartitionBuffer]:  # fmt: skip
    ready: list[PartitionBuffer] = []
    for offset in offsets:
        ready += buffers.add_row(tp, offset, (offset,), hour, size, now)
    return ready


@pytest.mark.parametrize("field", ["max_rows", "max_bytes", "max_age_s", "memory_budget_bytes"])
def test_limits_must_be_positive(field: str) -> None:
    with pytest.raises(SinkConfigError, match=field):
        limits(**{field: 0})


def test_the_budget_must_hold_one_full_buffer() -> None:
    with pytest.raises(SinkConfigError, match="budget"):
        limits(max_bytes=100, memory_budget_bytes=99)


def test_rows_of_one_hour_accumulate_from_the_resume_offset() -> None:
    buffers = BufferSet(limits())
    buffers.assign(TP, 40)
    assert fill(buffers, TP, range(40, 50)) == []
    assert buffers.position(TP) == 50
    assert buffers.total_bytes == 100
    [buffer] = buffers.drain()
    assert (buffer.first, buffer.last, len(buffer.rows), list(buffer.offsets)) == (
        40, 49, 10, list(range(40, 50)),
    )  # fmt: skip
    assert buffers.position(TP) == 50 and buffers.total_bytes == 0


def test_a_record_of_another_hour_closes_the_buffer_first() -> None:
    buffers = BufferSet(limits())
    buffers.assign(TP, None)
    fill(buffers, TP, range(5, 8))
    [closed] = buffers.add_row(TP, 8, (8,), HOUR + 1, 10, 0.0)
    assert (closed.first, closed.last, closed.hour) == (5, 7, HOUR)
    [current] = buffers.drain()
    assert (current.first, current.last, current.hour) == (8, 8, HOUR + 1)


def test_max_rows_and_max_bytes_close_a_buffer_when_reached() -> None:
    buffers = BufferSet(limits(max_rows=4))
    buffers.assign(TP, 0)
    ready = fill(buffers, TP, range(10))
    assert [(b.first, b.last) for b in ready] == [(0, 3), (4, 7)]
    by_bytes = BufferSet(limits(max_bytes=25))
    by_bytes.assign(TP, 0)
    assert [(b.first, b.last) for b in fill(by_bytes, TP, range(6))] == [(0, 2), (3, 5)]


def test_age_closes_a_buffer_on_the_wall_clock() -> None:
    buffers = BufferSet(limits(max_age_s=30))
    buffers.assign(TP, 0)
    fill(buffers, TP, range(3), now=100.0)
    assert buffers.due(129.9) == []
    [old] = buffers.due(130.0)
    assert (old.first, old.last) == (0, 2)
    assert rotation_reason(old, limits(max_age_s=30), 130.0) == "age"


def test_over_the_budget_the_largest_buffers_are_written() -> None:
    buffers = BufferSet(limits(max_bytes=10_000, memory_budget_bytes=10_000))
    for partition, count in [(0, 30), (1, 60), (2, 20)]:
        buffers.assign(("t", partition), 0)
        fill(buffers, ("t", partition), range(count), size=100)
    assert buffers.total_bytes == 11_000
    [largest] = buffers.due(0.0)
    assert largest.partition == 1
    assert buffers.total_bytes == 5_000
    assert buffers.due(0.0) == []


def test_dead_letters_extend_the_range_and_a_letters_only_buffer_has_a_placement() -> None:
    buffers = BufferSet(limits())
    buffers.assign(TP, 10)
    buffers.add_empty(TP, 10, HOUR - 5, 0.0, dead_letter=True)
    buffers.add_empty(TP, 11, HOUR - 5, 0.0, dead_letter=False)  # a tombstone
    [only_letters] = buffers.drain()
    assert (only_letters.first, only_letters.last, only_letters.rows) == (10, 11, [])
    assert (only_letters.dead_letters, only_letters.file_hour) == (1, HOUR - 5)
    buffers.add_empty(TP, 12, HOUR - 5, 0.0, dead_letter=True)
    fill(buffers, TP, range(13, 15))
    buffers.add_empty(TP, 15, HOUR - 5, 0.0, dead_letter=True)
    [mixed] = buffers.drain()
    assert (mixed.first, mixed.last, list(mixed.offsets), mixed.dead_letters) == (
        12,
        15,
        [13, 14],
        2,
    )
    assert mixed.file_hour == HOUR


def test_offsets_missing_from_the_log_are_covered_by_the_next_range() -> None:
    buffers = BufferSet(limits(max_rows=2))
    buffers.assign(TP, 0)
    ready = fill(buffers, TP, range(0, 2)) + fill(buffers, TP, range(7, 9))  # 2..6 compacted away
    assert [(b.first, b.last) for b in ready] == [(0, 1), (2, 8)]


def test_messages_below_the_position_or_of_other_partitions_are_stale() -> None:
    buffers = BufferSet(limits())
    buffers.assign(TP, 100)
    assert buffers.is_stale(TP, 99)
    assert not buffers.is_stale(TP, 100)
    assert buffers.is_stale(("t", 1), 0)
    fill(buffers, TP, range(100, 103))
    assert buffers.is_stale(TP, 102) and not buffers.is_stale(TP, 103)
    fresh = BufferSet(limits())
    fresh.assign(TP, None)
    assert not fresh.is_stale(TP, 0)


def test_release_hands_back_the_open_buffer_and_forgets_the_partition() -> None:
    buffers = BufferSet(limits())
    buffers.assign(TP, 0)
    fill(buffers, TP, range(3))
    released = buffers.release(TP)
    assert released is not None and released.last == 2
    assert buffers.owned() == [] and buffers.total_bytes == 0
    assert buffers.release(TP) is None


def test_estimated_bytes_grow_with_the_wire_size() -> None:
    assert estimated_bytes(1000) > estimated_bytes(100) > 100
