from pathlib import Path

import pytest

from streams.errors import SpoolError
from streams.spool import Spool, SpooledEvent


def _events(n: int, start: int = 0) -> list[SpooledEvent]:
    return [
        SpooledEvent("telemetry.edits", b"s-%d" % i, b"\x00value-%d" % i)
        for i in range(start, start + n)
    ]


def test_segments_round_trip_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    first = spool.write(_events(3))
    second = spool.write(_events(2, start=3))
    assert spool.segments() == [first, second]
    read = [e for s in spool.segments() for e in spool.read(s)]
    assert read == _events(5)


def test_nothing_to_write_makes_no_segment(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    assert spool.write([]) is None
    assert spool.segments() == []


def test_a_second_client_cannot_own_the_same_spool(tmp_path: Path) -> None:
    owner = Spool(tmp_path)
    with pytest.raises(SpoolError, match="in use by another running client"):
        Spool(tmp_path)
    owner.close()
    Spool(tmp_path).close()  # released


def test_numbering_continues_after_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    old = spool.write(_events(1))
    spool.close()
    reopened = Spool(tmp_path)
    new = reopened.write(_events(1, start=1))
    assert reopened.segments() == [old, new]


def test_a_half_written_segment_is_never_read(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    (tmp_path / "000000000009.tmp").write_bytes(b"FWSPOOL1\x00\x00")  # a crash mid-write
    assert spool.segments() == []
    spool.remove(tmp_path / "absent.spool")  # removing twice is harmless


def test_a_foreign_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    (tmp_path / "000000000001.spool").write_bytes(b"not a spool")
    with pytest.raises(SpoolError, match="move it away"):
        list(spool.read(tmp_path / "000000000001.spool"))
