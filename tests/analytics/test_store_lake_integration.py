"""A lake in the local stack's object store answers every view as the same lake on disk does,
through `analytics.connect` and `flywheel query --lake s3://…`, with hive partitions pruned."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import analytics
from analytics.views import ANALYST_VIEWS
from flywheel.cli import cli
from flywheel.settings import Settings
from ground.store import Store
from schemas.enums import Decision
from tests.analytics.lake_builder import write_lake
from tests.sample_events import offered

pytestmark = pytest.mark.integration
T0 = datetime(2026, 3, 1, 10, tzinfo=UTC)


@pytest.fixture
def lakes(stack: Settings, tmp_path: Path, unique: str) -> tuple[Path, Store]:
    """The same events written to a lake on disk and to one in the store."""
    if not stack.uses_local_stack:
        pytest.skip("an external cluster is configured: there is no local object store")
    events = [
        offered(
            f"s{i}",
            event_time=T0 + timedelta(minutes=7 * i),
            model_version=1 + i % 2,
            decision=Decision.SHOWN if i % 3 else Decision.SUPPRESSED,
        )
        for i in range(120)
    ]  # fmt: skip, 14 hours of events
    disk = tmp_path / "lake"
    store = Store.at(stack.storage(f"s3://flywheel/{unique}/lake"))
    assert write_lake(disk, events, rows_per_file=25) == write_lake(store, events, rows_per_file=25)
    return disk, store


def _everything(con: object, view: str) -> list[tuple[object, ...]]:
    rows = con.execute(f"select * from {view}").fetchall()  # type: ignore[attr-defined]
    return sorted(rows, key=repr)


def test_every_view_answers_from_the_store_as_from_disk(lakes: tuple[Path, Store]) -> None:
    disk, store = lakes
    with analytics.connect(disk) as local, analytics.connect(store) as remote:
        names = [v.name for v in ANALYST_VIEWS] + ["telemetry_suggestions", "rewards"]
        for name in names:
            assert _everything(remote, name) == _everything(local, name), name
        assert local.execute("select count(*) from telemetry_suggestions").fetchone() == (120,)


def test_a_filter_on_the_hour_prunes_files_in_the_store(lakes: tuple[Path, Store]) -> None:
    _, store = lakes
    hour = store.files("telemetry.suggestions/dt=2026-03-01/hour=11")
    assert hour
    # Damage every file of another hour: a query filtered to hour 11 must not open them.
    for stored in store.files("telemetry.suggestions/dt=2026-03-01/hour=15"):
        store.write_bytes(stored.key, b"not parquet")
    with analytics.connect(store) as con:
        rows = con.execute(
            "select count(*) from telemetry_suggestions where dt = '2026-03-01' and hour = 11"
        ).fetchone()
        assert rows is not None and rows[0] > 0
        with pytest.raises(Exception, match=r"(?i)parquet|magic"):
            con.execute("select count(*) from telemetry_suggestions").fetchall()


def test_flywheel_query_reads_the_lake_from_the_store(
    lakes: tuple[Path, Store], stack: Settings
) -> None:
    _, store = lakes
    sql = "select model_version, requests from acceptance_by_version order by 1"
    result = CliRunner().invoke(
        cli, ["query", "--lake", store.location.uri, "--format", "json", sql]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]  # JSON lines
    assert rows == [{"model_version": 1, "requests": 60}, {"model_version": 2, "requests": 60}]


def test_a_table_of_its_own_file_names_reads_from_the_store_as_from_disk(
    lakes: tuple[Path, Store],
) -> None:
    """`flywheel demo`'s results: whole files named by run, not the sink's offset ranges."""
    disk, store = lakes
    table = pa.table({"run_id": ["r1", "r1"], "version": [0, 1], "decision": ["", "PROMOTED"]})
    for lake in (Store.at(disk), store):
        key = "demo.results/dt=2026-03-01/hour=10/r1.parquet"
        lake.write_atomically(key, lambda out: pq.write_table(table, out))
    with analytics.connect(disk) as local, analytics.connect(store) as remote:
        assert _everything(remote, "demo_results") == _everything(local, "demo_results")
        assert remote.execute("select count(*) from demo_results").fetchone() == (2,)
