"""`flywheel lake compact`: its records on stdout (lines or JSON), its options."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from flywheel.cli import cli
from streams.topics import REWARDS_TOPIC
from tests.analytics.lake_builder import write_lake
from tests.processors.lake.test_lake_compaction import _events


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
    (row,) = json.loads(result.stdout)
    assert row["topic"] == REWARDS_TOPIC and row["files_after"] < row["files_before"]
    assert len(list(lake.rglob("*.parquet"))) == before - row["files_before"] + row["files_after"]


def test_compact_refuses_a_min_age_that_is_not_a_duration(tmp_path: Path) -> None:
    args = ["lake", "compact", "--lake", str(tmp_path), "--min-age", "3 weeks"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "not a duration" in result.output


def test_commands_on_local_lakes_refuse_an_object_store_naming_the_doc() -> None:
    for args in (["features", "get", "user", "u1", "--offline"],):
        result = CliRunner().invoke(cli, [*args, "--lake", "s3://flywheel/lake"])
        assert result.exit_code == 2, (args, result.output)
        assert "docs/object-storage.md" in result.output
