"""Lake paths: names <-> ranges, hour directories, scanning, the contiguity check."""

from __future__ import annotations

import fnmatch
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from contracts.errors import LakeLayoutError
from contracts.lake_layout import (
    LakeFile,
    file_name,
    file_path,
    hour_dir,
    hour_of,
    hour_of_ms,
    parse_file_name,
    parse_hour_dir,
    range_problems,
    scan_topic,
    split_superseded,
    temp_partition,
)
from ground.durable import temp_path


def test_a_file_name_encodes_its_range_and_parses_back() -> None:
    name = file_name("telemetry.suggestions", 3, 0, 49_999)
    assert name == "telemetry.suggestions+3+0+49999.parquet"
    parsed = parse_file_name(Path("/x") / name)
    assert parsed is not None
    assert (parsed.topic, parsed.partition, parsed.first, parsed.last) == (
        "telemetry.suggestions", 3, 0, 49_999,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("topic", "partition", "first", "last"),
    [("t", -1, 0, 1), ("t", 0, 5, 4), ("t", 0, -1, 3), ("bad+topic", 0, 0, 0), ("a/b", 0, 0, 0)],
)
def test_impossible_ranges_and_topics_are_refused(
    topic: str, partition: int, first: int, last: int
) -> None:
    with pytest.raises(LakeLayoutError):
        file_name(topic, partition, first, last)


@pytest.mark.parametrize(
    "name",
    [
        "x.parquet",
        "t+1+2.parquet",
        "t+a+1+2.parquet",
        "t+1+2+3.parquet.tmp",
        ".t+1+2+3.parquet.ab.tmp",
    ],
)
def test_other_names_do_not_parse(name: str) -> None:
    assert parse_file_name(Path(name)) is None


def test_temp_names_are_hidden_from_parquet_globs_and_name_their_partition() -> None:
    final = Path("/lake/t/dt=2026-01-01/hour=00/t.x+2+10+20.parquet")
    temp = temp_path(final)
    assert temp.parent == final.parent
    assert temp.name.startswith(".") and temp.name.endswith(".tmp")
    assert not fnmatch.fnmatch(temp.name, "*.parquet")
    assert temp_path(final) != temp
    assert temp_partition(temp.name) == ("t.x", 2)
    assert temp_partition(final.name) is None


def test_hours_are_utc_and_floor_before_the_epoch() -> None:
    moment = datetime(2026, 3, 4, 5, 59, 59, 999_000, tzinfo=UTC)
    assert hour_dir(Path("/l"), "t", hour_of(moment)) == Path("/l/t/dt=2026-03-04/hour=05")
    assert hour_of(moment) == hour_of_ms(int(moment.timestamp() * 1000))
    assert hour_of(moment + timedelta(milliseconds=1)) == hour_of(moment) + 1
    assert hour_of(datetime(1969, 12, 31, 23, 30, tzinfo=UTC)) == -1
    other_zone = moment.astimezone(ZoneInfo("Asia/Tokyo"))
    assert hour_of(other_zone) == hour_of(moment)
    assert file_path(Path("/l"), "t", 1, 5, 9, 0) == Path(
        "/l/t/dt=1970-01-01/hour=00/t+1+5+9.parquet"
    )


def test_a_scan_finds_files_per_partition_in_order_and_temps_and_ignores_the_rest(
    tmp_path: Path,
) -> None:
    names = {
        "dt=2026-01-01/hour=00": ["t+0+0+9.parquet", "t+1+0+4.parquet", "t+0+25+30.parquet"],
        "dt=2026-01-01/hour=01": ["t+0+10+24.parquet", ".t+1+5+8.parquet.0a1b.tmp", "notes.txt"],
        "dt=2026-01-01/hour=02": ["other+0+31+40.parquet"],  # another topic's name: not ours
    }
    for directory, files in names.items():
        (tmp_path / "t" / directory).mkdir(parents=True)
        for name in files:
            (tmp_path / "t" / directory / name).touch()
    scan = scan_topic(tmp_path, "t")
    assert [(f.first, f.last) for f in scan.files[0]] == [(0, 9), (10, 24), (25, 30)]
    assert [f.name for f in scan.files[1]] == ["t+1+0+4.parquet"]
    assert scan.temps[1] == ["t/dt=2026-01-01/hour=01/.t+1+5+8.parquet.0a1b.tmp"]  # keys
    assert scan.resume_offsets() == {0: 31, 1: 5}
    assert scan_topic(tmp_path, "missing").files == {}


def lake_file(first: int, last: int) -> LakeFile:
    return LakeFile("t", 0, first, last, file_name("t", 0, first, last))


def test_range_problems_name_gaps_and_overlaps() -> None:
    assert range_problems([lake_file(10, 19), lake_file(0, 9), lake_file(20, 20)]) == []
    assert range_problems([lake_file(0, 9)], start=0) == []
    gap = range_problems([lake_file(0, 9), lake_file(11, 19)])
    assert len(gap) == 1 and gap[0].startswith("gap before t+0+11+19")
    overlap = range_problems([lake_file(0, 9), lake_file(5, 19)])
    assert len(overlap) == 1 and overlap[0].startswith("overlap")
    assert range_problems([lake_file(3, 9)], start=0)[0].startswith("gap")


def _touch(lake: Path, partition: int, first: int, last: int, hour: int) -> str:
    path = file_path(lake, "t", partition, first, last, hour)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return str(path)


def test_a_file_inside_a_larger_files_range_is_superseded_not_visible(tmp_path: Path) -> None:
    # Compaction renamed [0, 29] into place and died before deleting what it merged.
    h = 500_000
    merged = _touch(tmp_path, 0, 0, 29, h)
    inputs = [_touch(tmp_path, 0, a, b, h) for a, b in ((0, 9), (10, 19), (20, 29))]
    later = _touch(tmp_path, 0, 30, 39, h + 1)
    other = _touch(tmp_path, 1, 0, 9, h)  # another partition: never compared across
    scan = scan_topic(tmp_path, "t")
    assert [f.path for f in scan.files[0]] == [merged, later]
    assert [f.path for f in scan.superseded[0]] == inputs
    assert [f.path for f in scan.files[1]] == [other] and 1 not in scan.superseded
    assert range_problems(scan.files[0], start=0) == []
    assert scan.resume_offsets() == {0: 40, 1: 10}


def test_equal_ranges_and_partial_overlaps_stay_visible_for_range_problems() -> None:
    def f(first: int, last: int, where: str) -> LakeFile:
        return LakeFile("t", 0, first, last, f"{where}/{file_name('t', 0, first, last)}")

    twice = [f(0, 9, "h1"), f(0, 9, "h2")]
    visible, superseded = split_superseded(twice)
    assert (len(visible), superseded) == (2, [])
    assert range_problems(visible, start=0) == [
        "overlap before t+0+0+9.parquet: expected first offset 10"
    ]
    partial = [f(0, 9, "h"), f(5, 14, "h")]  # not inside one file: a real overlap
    visible, superseded = split_superseded(partial)
    assert (visible, superseded) == (sorted(partial), [])
    assert range_problems(visible) != []
    nested = [f(0, 99, "h"), f(10, 19, "h"), f(12, 15, "h"), f(100, 100, "h")]
    visible, superseded = split_superseded(nested)
    assert [(v.first, v.last) for v in visible] == [(0, 99), (100, 100)]
    assert [(s.first, s.last) for s in superseded] == [(10, 19), (12, 15)]


def test_hour_directories_parse_back_to_their_hour(tmp_path: Path) -> None:
    hour = hour_of(datetime(2026, 3, 4, 5, tzinfo=UTC))
    assert parse_hour_dir(hour_dir(tmp_path, "t", hour)) == hour
    for bad in ("t/dt=2026-03-04/hour=24", "t/dt=2026-13-01/hour=01", "t/x/hour=01", "t/dt=x"):
        assert parse_hour_dir(tmp_path / bad) is None
