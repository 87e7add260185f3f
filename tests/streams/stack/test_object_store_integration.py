"""The local stack's object store end to end: signed requests only, Parquet written and read back
through a storage location, and DuckDB querying it through a pyarrow dataset with the filter
pushed down (DuckDB's own httpfs extension downloads at run time, which CI machines cannot)."""

from __future__ import annotations

import duckdb
import httpx
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs

from flywheel.settings import Settings
from ground.storage import StorageLocation
from streams.stack.local import LocalStack
from streams.stack.s3 import ObjectStoreService

pytestmark = pytest.mark.integration


def _store(stack: Settings) -> ObjectStoreService:
    if not stack.uses_local_stack:
        pytest.skip("an external cluster is configured: there is no local object store")
    return LocalStack(stack.home, stack.ports).s3


def _location(stack: Settings, unique: str) -> StorageLocation:
    env = _store(stack).client_environment()
    return StorageLocation.parse(f"s3://{_store(stack).bucket}/{unique}", env)


def test_the_store_answers_signed_requests_only(stack: Settings, unique: str) -> None:
    store = _store(stack)
    assert store.answers()
    unsigned = httpx.get(f"{store.endpoint}/{store.bucket}/", timeout=10)
    assert unsigned.status_code == 403
    location = _location(stack, unique)
    wrong = StorageLocation.parse(
        location.uri,
        {**store.client_environment(), "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
    )
    with pytest.raises(OSError, match=r"(?i)403|access.?denied|signature"):
        wrong.filesystem().get_file_info(location.path)
    # Signed: the default bucket exists from `stack up` on.
    fs = location.filesystem()
    assert fs.get_file_info(store.bucket).type.name == "Directory"
    with fs.open_output_stream(f"{location.path}/private") as out:
        out.write(b"x")
    assert httpx.get(f"{store.endpoint}/{location.path}/private", timeout=10).status_code == 403


def test_parquet_round_trip_and_a_duckdb_query_with_partitions_pruned(
    stack: Settings, unique: str
) -> None:
    location = _location(stack, unique)
    fs = location.filesystem()
    table = pa.table({
        "day": ["1", "1", "2", "2", "2"],
        "user": ["a", "b", "a", "c", "d"],
        "reward": [0.1, 0.9, 0.7, 0.2, 0.8],
    })  # fmt: skip
    ds.write_dataset(
        table, location.path, filesystem=fs, format="parquet", partitioning=["day"],
        partitioning_flavor="hive", basename_template="part-{i}.parquet",
    )  # fmt: skip
    one = location.child("day=2")
    files = [f.path for f in fs.get_file_info(pafs.FileSelector(one.path)) if f.is_file]
    assert len(files) == 1
    back = pq.read_table(files[0], filesystem=fs)
    assert sorted(back.column("user").to_pylist()) == ["a", "c", "d"]
    # Not Parquet at all: a query that reads this partition fails, so one that succeeds with a
    # filter on `day` had the partition pruned in the scan, not after it.
    with fs.open_output_stream(f"{location.path}/day=9/part-0.parquet") as junk:
        junk.write(b"not parquet")

    days = ds.partitioning(pa.schema([("day", pa.string())]), flavor="hive")
    dataset = ds.dataset(location.path, filesystem=fs, format="parquet", partitioning=days)
    con = duckdb.connect()
    con.register("events", dataset)
    rows = con.execute(
        "SELECT user, reward FROM events WHERE day = '2' AND reward > 0.5 ORDER BY user"
    ).fetchall()
    assert rows == [("a", 0.7), ("d", 0.8)]
    with pytest.raises(duckdb.Error):
        con.execute("SELECT count(*) FROM events").fetchall()
