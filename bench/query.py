"""Benchmark: an analyst query over many small lake files vs one compacted file.

Generates `--rows` reward rows (default 10M) with realistic columns (event_time, source,
model_name, model_version, decision, propensity, language, reward, reward_fn and the Kafka
columns) and writes them twice, the way the sink and a compaction would:

- `many/`: `--files` files (default 240) in the DESIGN §6 layout, 4 partitions over
  hours, each one row group (rows / files each, ~42k at 10M: close to the sink's 50k rotation);
- `compact/`: one file with the same rows in 128k-row groups (the sink's `ROW_GROUP_ROWS`).

Then, through the real path (`Catalog(lake).connect()`, the `rewards` view with
`union_by_name` and hive partitioning), it times acceptance by model version and language
`--repeats` times per lake and prints the medians and the ratio many-files / compacted (target
<= 1.5x). The first (cold) run and the catalog's connect time are printed too.

    .venv/bin/python -m bench.query --rows 2000000
    .venv/bin/python -m bench.query            # 10M rows
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from analytics import Catalog
from contracts.lake_layout import file_path
from ground.store import Store
from processors.lake.writer import COMPRESSION, ROW_GROUP_ROWS, write_parquet_atomically

TOPIC = "rewards"
PARTITIONS = 4
START_HOUR = 480_000  # hours since the epoch: 2024-10-04
LANGUAGES = ("python", "typescript", "go", "rust", "java", "cpp", "ruby", "kotlin")
VERSIONS = 5
QUERY = """
SELECT model_name, model_version, language,
       count(*) AS requests,
       count(*) FILTER (WHERE decision = 'SHOWN') AS shown,
       count(*) FILTER (WHERE reward > 0) AS accepted,
       1000.0 * shown / requests AS shown_per_1000,
       accepted / nullif(shown, 0) AS accept_rate,
       avg(reward) AS reward_per_request
FROM rewards
WHERE source = 'SUGGESTION' AND reward_fn = 'tab@1'
GROUP BY ALL ORDER BY ALL
"""


def _strings(rng: np.random.Generator, values: tuple[str, ...], p: list[float], n: int) -> pa.Array:
    indices = pa.array(rng.choice(len(values), size=n, p=p).astype(np.int32))
    return pa.DictionaryArray.from_arrays(indices, pa.array(values)).cast(pa.string())


def reward_rows(rng: np.random.Generator, n: int, hour: int, first_offset: int) -> pa.Table:
    """`n` reward rows in `hour`: tab@1 (90%) and survival@1 rewards, acceptance depending on
    version and language, 3% rollout rows."""
    version = rng.integers(0, VERSIONS, n).astype(np.int32)
    language = rng.integers(0, len(LANGUAGES), n)
    shown = rng.random(n) < 0.6 + 0.05 * version
    p_accept = 0.2 + 0.03 * version + 0.02 * language
    accepted = shown & (rng.random(n) < p_accept)
    reward = np.where(accepted, 0.75, np.where(shown, -0.25, 0.0))
    start_ms = hour * 3_600_000
    columns = {
        "event_time": pa.array(
            start_ms + np.sort(rng.integers(0, 3_600_000, n)), pa.timestamp("ms", tz="UTC")
        ),
        # The views keep one row per reward_id (a re-emitted Reward): unique here.
        "reward_id": pa.array([f"r{hour}-{first_offset + i}" for i in range(n)]),
        "source": _strings(rng, ("SUGGESTION", "ROLLOUT"), [0.97, 0.03], n),
        "model_name": pa.array(["suggestion-gate"] * n),
        "model_version": pa.array(version),
        "decision": pa.DictionaryArray.from_arrays(
            pa.array(shown.astype(np.int32)), pa.array(["SUPPRESSED", "SHOWN"])
        ).cast(pa.string()),
        "propensity": pa.array(np.where(shown, 0.9, 0.1)),
        "language": pa.DictionaryArray.from_arrays(
            pa.array(language.astype(np.int32)), pa.array(LANGUAGES)
        ).cast(pa.string()),
        "reward": pa.array(reward),
        "reward_fn": _strings(rng, ("tab@1", "survival@1"), [0.9, 0.1], n),
        "advantage": pa.nulls(n, pa.float64()),
        "_topic": pa.array([TOPIC] * n),
        "_partition": pa.array(np.full(n, hour % PARTITIONS, dtype=np.int32)),
        "_offset": pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)),
    }
    return pa.table(columns)


def generate(root: Path, rows: int, files: int, seed: int) -> tuple[Path, Path]:
    """Write the many-file lake and the compacted lake under `root`; returns both lake paths."""
    many, compact = root / "many", root / "compact"
    rng = np.random.default_rng(seed)
    final = file_path(compact, TOPIC, 0, 0, rows - 1, START_HOUR)
    final.parent.mkdir(parents=True, exist_ok=True)
    offsets = [0] * PARTITIONS
    pending: list[pa.Table] = []
    with pq.ParquetWriter(final, reward_rows(rng, 1, 0, 0).schema, compression=COMPRESSION) as w:
        for i in range(files):
            n = rows // files + (1 if i < rows % files else 0)
            hour = START_HOUR + i  # one file per hour and partition slot
            partition = hour % PARTITIONS
            table = reward_rows(rng, n, hour, offsets[partition])
            path = file_path(
                many, TOPIC, partition, offsets[partition], offsets[partition] + n - 1, hour
            )
            write_parquet_atomically(table, path)
            offsets[partition] += n
            pending.append(table)
            if sum(t.num_rows for t in pending) >= ROW_GROUP_ROWS or i == files - 1:
                w.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
                pending = []
    return many, compact


def time_query(
    lake: Path | Store, repeats: int
) -> tuple[float, float, list[float], list[tuple[object, ...]]]:
    """(connect s, cold first run s, warm run times s, result rows) over `lake`'s catalog."""
    start = time.perf_counter()
    con = Catalog(lake).connect()
    connect_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        result = con.execute(QUERY).fetchall()
        cold_s = time.perf_counter() - start
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            con.execute(QUERY).fetchall()
            runs.append(time.perf_counter() - start)
    finally:
        con.close()
    return connect_s, cold_s, runs, result


def _rounded(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    # Parallel float sums differ in the last bits with the order rows arrive in.
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=240)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="Where to write (default: temp).")
    parser.add_argument("--keep", action="store_true", help="Keep the generated lakes.")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="flywheel-bench-query-"))
    try:
        start = time.perf_counter()
        many, compact = generate(root, args.rows, args.files, args.seed)
        print(f"generated {args.rows:,} rows: {args.files} files + 1 compacted "
              f"in {time.perf_counter() - start:.1f}s under {root}")  # fmt: skip
        medians = {}
        results = {}
        for name, lake in (("many files", many), ("compacted", compact)):
            connect_s, cold_s, runs, results[name] = time_query(lake, args.repeats)
            medians[name] = statistics.median(runs)
            size_mb = sum(p.stat().st_size for p in lake.rglob("*.parquet")) / 1e6
            print(f"{name:>10}: {size_mb:7.1f} MB | connect {connect_s:.3f}s | cold "
                  f"{cold_s:.3f}s | median {medians[name]:.3f}s of {[round(r, 3) for r in runs]}")  # fmt: skip  # noqa: E501
        if _rounded(results["many files"]) != _rounded(results["compacted"]):
            raise SystemExit("the two lakes gave different results: a bug in the benchmark")
        ratio = medians["many files"] / medians["compacted"]
        verdict = "ok" if ratio <= 1.5 else "over the 1.5x target"
        print(f"ratio many-files / compacted: {ratio:.2f}x ({verdict}); "
              f"{len(results['compacted'])} result rows")  # fmt: skip
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
