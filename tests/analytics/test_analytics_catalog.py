"""catalog.duckdb: what it holds, when refresh rewrites it, locks, empty lakes, Python API."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import analytics
from analytics import Catalog, EmptyLakeError, QueryError, UnknownViewError
from analytics.views import ANALYST_VIEWS
from schemas.events import RolloutResult
from tests.analytics.lake_builder import write_lake
from tests.sample_events import PRODUCER, offered

T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)


def _lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    write_lake(lake, [offered(f"s{i}", event_time=T0 + timedelta(minutes=i)) for i in range(3)])
    return lake


def test_catalog_file_serves_other_tools_read_only(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    assert Catalog(lake).refresh() is True
    with duckdb.connect(str(lake / "catalog.duckdb"), read_only=True) as con:
        views = {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}
        assert {"telemetry_suggestions", "rewards", *(v.name for v in ANALYST_VIEWS)} <= views
        assert con.execute("select requests from acceptance_by_version").fetchall() == [(3,)]
        sql = con.execute(
            "select sql from duckdb_views() where view_name = 'telemetry_suggestions'"
        ).fetchall()[0][0]
        assert str(lake.absolute() / "telemetry.suggestions") in sql  # absolute paths


def test_refresh_is_a_no_op_until_a_topic_gets_files(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    catalog = Catalog(lake)
    assert catalog.refresh() is True
    assert catalog.refresh() is False
    write_lake(lake, [offered("s9", event_time=T0)])  # same topic, more files: nothing to do
    assert catalog.refresh() is False
    rollout = RolloutResult(
        producer=PRODUCER, event_time=T0, rollout_id="r", task_id="t", group_id="g",
        model_name="agent", model_version=1, prompt_tokens=1, completion_tokens=1, tool_calls=0,
        tests_passed=1, tests_total=2, reward_components={}, behaviour_logprobs=(),
        duration_ms=1,
    )  # fmt: skip
    write_lake(lake, [rollout])
    assert catalog.refresh() is True
    with duckdb.connect(str(catalog.path), read_only=True) as con:
        assert con.execute("select pass_rate from rollout_pass_rates").fetchall() == [(0.5,)]


def test_new_columns_show_without_a_rebuild(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    hour = lake / "custom.topic" / "dt=2025-03-01" / "hour=12"
    hour.mkdir(parents=True)
    pq.write_table(pa.table({"a": [1]}), hour / "custom.topic+0+0+0.parquet")
    catalog = Catalog(lake)
    with catalog.connect() as con:
        assert con.execute("select * from custom_topic").fetchall() == [(1, T0.date(), 12)]
    pq.write_table(pa.table({"a": [2], "b": ["new"]}), hour / "custom.topic+0+1+1.parquet")
    (hour / ".custom.topic+0+2+2.parquet.abc.tmp").write_bytes(b"half a file")
    assert catalog.refresh() is False
    with duckdb.connect(str(catalog.path), read_only=True) as con:
        rows = con.execute("select a, b from custom_topic order by a").fetchall()
    assert rows == [(1, None), (2, "new")]


def test_a_locked_catalog_file_does_not_stop_queries(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    Catalog(lake).refresh()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True);"
         " time.sleep(30)", str(lake / "catalog.duckdb")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        write_lake(lake, [offered("x", event_time=T0 + timedelta(hours=2))], partitions=1)
        (lake / "rollouts.results").mkdir()  # no file: changes nothing
        catalog = Catalog(lake, lock_timeout_s=0.2)
        start = time.monotonic()
        with catalog.connect() as con:
            assert con.execute("select count(*) from telemetry_suggestions").fetchall() == [(4,)]
        assert catalog.rewrote is False
        assert time.monotonic() - start < 5
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("make", ["missing", "temp-only"])
def test_an_empty_lake_says_how_to_fill_it(tmp_path: Path, make: str) -> None:
    lake = tmp_path / "lake"
    if make == "temp-only":
        hour = lake / "rewards" / "dt=2025-03-01" / "hour=12"
        hour.mkdir(parents=True)
        (hour / ".rewards+0+0+9.parquet.0a1b.tmp").write_bytes(b"")
    with pytest.raises(EmptyLakeError, match="flywheel demo"):
        Catalog(lake).connect()
    assert not (lake / "catalog.duckdb").exists()


def test_python_entry_points(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    relation = analytics.query("select requests, shown from acceptance_by_version", lake)
    assert relation.fetchall() == [(3, 3)]
    table = analytics.to_arrow("select suggestion_id from suggestion_facts", lake=lake)
    assert isinstance(table, pa.Table)
    assert table.num_rows == 3
    with analytics.connect(lake) as con:
        assert analytics.query("select 1 as one", con=con).fetchall() == [(1,)]
        names = [v.name for v in analytics.list_views(con, Catalog(lake))]
        assert names[0] == "agent_completions"  # topic views first, sorted
        assert names[-1] == ANALYST_VIEWS[-1].name


def test_bad_sql_names_the_position(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    with pytest.raises(QueryError) as parser:
        analytics.query("select *\nfrom rewards\nwehre reward > 0", lake)
    assert "Parser Error" in str(parser.value)
    assert "line 3, column 7" in str(parser.value)  # `wehre` reads as an alias
    with pytest.raises(QueryError) as binder:
        analytics.query("select nope from rewards", lake)
    assert "Binder Error" in str(binder.value)
    assert "line 1, column 8" in str(binder.value)


def test_unknown_view_lists_the_views(tmp_path: Path) -> None:
    with pytest.raises(UnknownViewError) as missing:
        analytics.query("select * from acceptance", _lake(tmp_path))
    message = str(missing.value)
    assert "acceptance does not exist" in message
    assert "acceptance_by_version" in message
    assert "telemetry_suggestions" in message
    assert "flywheel_catalog" not in message
