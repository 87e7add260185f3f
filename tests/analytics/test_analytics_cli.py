"""`flywheel query` through click's CliRunner, FLYWHEEL_LAKE pointed at a small real lake."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from flywheel.cli import cli
from schemas.enums import Decision
from tests.analytics.lake_builder import write_lake
from tests.sample_events import offered

T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)
VERSIONS = "select model_version, requests, shown from acceptance_by_version"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lake")
    events = [
        offered(f"s{i}", event_time=T0 + timedelta(minutes=i), model_version=i % 2,
                decision=Decision.SHOWN if i < 3 else Decision.SUPPRESSED)
        for i in range(5)
    ]  # fmt: skip
    write_lake(root, events)
    return root


def run(lake: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["query", *args], input=stdin, env={"FLYWHEEL_LAKE": str(lake)})


def test_table_is_the_default(lake: Path) -> None:
    result = run(lake, VERSIONS)
    assert result.exit_code == 0, result.output
    assert "model_version" in result.output
    assert "2 rows" in result.output


def test_csv_and_json(lake: Path) -> None:
    as_csv = run(lake, "--format", "csv", VERSIONS)
    assert as_csv.exit_code == 0, as_csv.output
    assert list(csv.DictReader(io.StringIO(as_csv.output))) == [
        {"model_version": "0", "requests": "3", "shown": "2"},
        {"model_version": "1", "requests": "2", "shown": "1"},
    ]
    as_json = run(lake, "--format", "json", "select event_time, context from telemetry_suggestions "
                  "order by event_time limit 1")  # fmt: skip
    assert as_json.exit_code == 0, as_json.output
    (row,) = [json.loads(line) for line in as_json.output.splitlines()]
    assert row["event_time"].startswith("2025-03-01 12:00:00")
    assert row["context"] == [0.5, -1.0, 2.0]


def test_parquet_needs_out_and_writes_it(lake: Path, tmp_path: Path) -> None:
    missing = run(lake, "--format", "parquet", VERSIONS)
    assert missing.exit_code == 2
    assert "--out" in missing.output
    target = tmp_path / "v.parquet"
    written = run(lake, "--format", "parquet", "--out", str(target), VERSIONS)
    assert written.exit_code == 0, written.output
    assert pq.read_table(target).to_pydict()["requests"] == [3, 2]


def test_sql_from_stdin_and_file(lake: Path, tmp_path: Path) -> None:
    from_stdin = run(lake, "--format", "csv", "-", stdin="select count(*) as n from rewards")
    assert from_stdin.output == "n\n0\n"
    sql_file = tmp_path / "q.sql"
    sql_file.write_text("select count(*) as n\nfrom telemetry_suggestions;\n")
    from_file = run(lake, "--format", "csv", "--file", str(sql_file))
    assert from_file.output == "n\n5\n"


def test_views_lists_views_and_columns(lake: Path) -> None:
    result = run(lake, "--views")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # CliRunner is no terminal: one view per line
    assert lines[0].split("\t") == ["view", "kind", "description", "columns"]
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert rows["acceptance_by_version"][1] == "analyst"
    assert "accept_rate" in rows["acceptance_by_version"][3]
    assert rows["telemetry_suggestions"][1] == "topic"
    assert all(len(row) == 4 for row in rows.values())
    views = json.loads(run(lake, "--views", "--json").stdout)
    assert {v["view"] for v in views} == set(rows)
    by_name = {v["view"]: v for v in views}
    assert {"name": "accept_rate", "type": "DOUBLE"} in by_name["acceptance_by_version"]["columns"]
    assert run(lake, "--json", "select 1").exit_code == 2  # results: --format json


def test_bad_sql_exits_1_with_the_position_and_no_traceback(lake: Path) -> None:
    result = run(lake, "select model_versio from acceptance_by_version")
    assert result.exit_code == 1
    assert "Binder Error" in result.output
    assert "line 1, column 8" in result.output
    assert "Traceback" not in result.output


def test_unknown_view_lists_views(lake: Path) -> None:
    result = run(lake, "select * from acceptance")
    assert result.exit_code == 1
    assert "acceptance_by_day" in result.output
    assert "Traceback" not in result.output


def test_empty_lake_says_to_run_the_sink_or_demo(tmp_path: Path) -> None:
    result = run(tmp_path / "nothing-here", VERSIONS)
    assert result.exit_code == 1
    assert "flywheel demo" in result.output
    assert "flywheel sink" in result.output


def test_no_sql_is_a_usage_error(lake: Path) -> None:
    result = run(lake)
    assert result.exit_code == 2
    assert "--views" in result.output
