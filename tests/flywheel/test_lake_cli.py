"""`flywheel lake compact` and the unit option types it uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from flywheel.commands.units import parse_bytes, parse_duration_s
from streams.topics import REWARDS_TOPIC
from tests.analytics.lake_builder import write_lake
from tests.processors.lake.test_lake_compaction import _events


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("5m", 300), ("2h", 7200), ("30d", 2_592_000),
                          ("250ms", 0.25), ("1.5h", 5400), ("0s", 0)],
)  # fmt: skip
def test_durations_carry_their_unit(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"), [("128MiB", 128 * 2**20), ("1GB", 10**9), ("4096", 4096)]
)
def test_sizes_carry_their_unit(text: str, size: int) -> None:
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["90", "5 minutes", "-1h", "h"])
def test_a_duration_without_a_unit_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_s(text)


def test_compact_reports_each_topic_as_json_and_as_lines(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_lake(lake, _events(), partitions=2, rows_per_file=2)
    before = len(list(lake.rglob("*.parquet")))
    args = ["lake", "compact", "--lake", str(lake), "--topic", REWARDS_TOPIC]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    lines = dry.stdout.splitlines()
    assert lines[0].split("\t")[:2] == ["topic", "runs"] and len(lines) == 2
    assert len(list(lake.rglob("*.parquet"))) == before
    result = CliRunner().invoke(cli, [*args, "--json", "--min-age", "2h", "--target-size", "1MiB"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (row,) = report["topics"]
    assert row["topic"] == REWARDS_TOPIC and row["files_after"] < row["files_before"]
    assert len(list(lake.rglob("*.parquet"))) == before - row["files_before"] + row["files_after"]


def test_compact_refuses_a_bare_number_as_min_age(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["lake", "compact", "--lake", str(tmp_path), "--min-age", "3"])
    assert result.exit_code == 2 and "not a duration" in result.output
