"""The offset a joiner worker commits (`processors.joiner.transport.commit_offset`)."""

from __future__ import annotations

from processors.joiner.transport import commit_offset


def test_the_first_run_of_consecutive_acked_offsets_is_committed() -> None:
    assert commit_offset([12, 10, 11, 14, 15], 10, None) == (13, [14, 15])
    assert commit_offset([], 10, None) == (None, [])


def test_repeated_offsets_do_not_end_a_run() -> None:
    """Offsets faust's fetches jumped over are listed as a gap and again when the seek back
    brings them: with faust's own rule the commit crawled one or two offsets at a time."""
    acked = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11]
    assert commit_offset(acked, 5, None) == (12, [])


def test_a_commit_never_passes_the_last_applied_record() -> None:
    """Offsets 20..29 were skipped by the consumer (a gap, so "acked") and are waiting to be
    read again; 30..39 were acked but not applied. A commit past 20 would lose 20..39 at a
    crash."""
    acked = list(range(10, 40))
    assert commit_offset(acked, 10, 20) == (20, list(range(20, 40)))
    # Nothing applied beyond the committed offset: nothing to commit, nothing dropped.
    assert commit_offset(list(range(20, 40)), 20, 20) == (None, list(range(20, 40)))
    # Nothing applied at all (marker missing: 0).
    assert commit_offset([0, 1, 2], None, 0) == (None, [0, 1, 2])


def test_acked_offsets_after_a_missing_one_wait() -> None:
    """faust's rule: the first acked offset may be at most one past the committed offset (its
    ack check leaves out the offset equal to the committed one)."""
    assert commit_offset([13, 14], 10, None) == (None, [13, 14])
    assert commit_offset([11, 12], 10, None) == (13, [])
