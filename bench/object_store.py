"""Benchmark: the lake in the local stack's object store (S3Proxy over HTTP) against local disk.

Same run, same machine, alternating which goes first each round; only ratios are reported
(issue 37's targets in brackets):

- **sink:** a topic pre-filled with SuggestionOffered events (`bench.pipeline_sink`'s) is drained
  by `LakeSink` into a lake on disk and, with another consumer group, into a prefix in the
  store. Rows/s from the first message to the last commit; store / disk [>= 0.7x].
- **stream:** MDS windows (one 8 KiB sample per row, several shards each) on disk and the same
  windows published to the store (`learner.data.window_store`); `build_loader(kind="streaming")`
  reads every sample of each. The store's first epoch downloads into an empty cache (printed);
  its second reads the cache: samples/s, store (cached) / disk [>= 0.8x].
- **query:** `bench.query`'s many-file reward lake (one file per hour and partition) is written
  to disk and the same files uploaded to the store; the analyst query runs through
  `Catalog(lake).connect()` on each: warm medians and store / disk [<= 2x]. Connect time (which
  lists the store) and the first, cold run are printed too.

Needs the local stack (`flywheel stack up`; the store is part of it):

    .venv/bin/python -m bench.object_store --events 100000 --rows 2000000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.pipeline_sink import filled_topic, make_values, sink_rate
from bench.query import generate, time_query
from flywheel.clients import codec as make_codec
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from ground.store import Store
from learner.data.window_manifest import WINDOW_RECORD_NAME, Manifest, WindowRecord, record_json
from learner.data.window_store import (
    publish_manifest,
    publish_window,
    remote_streams,
    streaming_from,
)
from learner.engine.loader import WindowStream, build_loader, release_loader
from streams.serde import AvroCodec


def _alternate(measures: list[Callable[[], float]], r: int) -> list[float]:
    """Run each measure, the first one first on even rounds; results in `measures`' order."""
    order = range(len(measures)) if r % 2 == 0 else reversed(range(len(measures)))
    results = {i: measures[i]() for i in order}
    return [results[i] for i in range(len(measures))]


def bench_sink(
    settings: Settings, codec: AvroCodec, events: int, rounds: int, console: Console
) -> float:
    values = make_values(codec, events)
    table = Table("round", "disk rows/s", "store rows/s", "store / disk")
    ratios = []
    for r in range(rounds):
        topic = filled_topic(settings, values, "bench.store")
        store = Store.at(settings.storage(f"s3://flywheel/bench/{topic}/lake"))
        with tempfile.TemporaryDirectory() as tmp:
            drain = partial(sink_rate, settings, codec, topic, f"{topic}.dlq")
            disk, remote = _alternate(
                [partial(drain, Path(tmp) / "lake"), partial(drain, store)], r
            )
        ratios.append(remote / disk)
        table.add_row(str(r + 1), f"{disk:,.0f}", f"{remote:,.0f}", f"{remote / disk:.2f}x")
    console.print(table)
    median = statistics.median(ratios)
    console.print(f"sink: median store / disk {median:.2f}x (target >= 0.7x)")
    return median


def _windows(root: Path, samples: int) -> list[tuple[Path, WindowRecord]]:
    """Two MDS windows of `samples` samples (an id and 2,048 float32s) under `root`."""
    from streaming import MDSWriter

    made = []
    for seq in range(2):
        name = f"w{seq:06d}-bench{seq:07d}"
        record = WindowRecord(
            name=name, seq=seq, reward_fn="bench", context_spec="bench", files=(), rows=samples,
            heldout_rows=0, skipped_rows=0, samples=samples, rows_per_sample=1, context_dim=2048,
        )  # fmt: skip
        columns = {"id": "int", "x": "ndarray:float32:2048"}
        with MDSWriter(out=str(root / name), columns=columns, size_limit=16 << 20) as writer:
            for i in range(samples):
                writer.write({"id": i, "x": np.full(2048, i % 251, np.float32)})
        (root / name / WINDOW_RECORD_NAME).write_text(record_json(record))
        made.append((root / name, record))
    return made


def _epoch(streams: list[WindowStream], limit: int | None) -> float:
    """Samples/s of one pass of a fresh streaming loader over `streams`."""
    loader = build_loader(streams, 64, seed=1, kind="streaming", cache_limit=limit)
    start, count = time.perf_counter(), 0
    for batch in loader:
        count += len(batch["id"])
    elapsed = time.perf_counter() - start
    release_loader(loader, True)
    return count / elapsed


def bench_stream(settings: Settings, samples: int, rounds: int, console: Console) -> float:
    table = Table("round", "disk samples/s", "store cold samples/s", "store cached samples/s",
                  "cached / disk")  # fmt: skip
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        built = _windows(Path(tmp) / "built", samples)
        store = Store.at(settings.storage(f"s3://flywheel/bench/mds-{uuid.uuid4().hex[:8]}"))
        manifest = Manifest("bench", "bench")
        for directory, record in built:
            publish_window(store, "bench", directory)
            manifest = manifest.with_window(record)
        publish_manifest(store, manifest)
        local = [WindowStream(local=directory) for directory, _ in built]
        names = [record.name for _, record in built]
        with streaming_from(store.location):
            for r in range(rounds):
                cache = Path(tmp) / f"cache-{r}"
                remote = remote_streams(store, "bench", names, cache)
                cold = _epoch(remote, None)
                disk, cached = _alternate(
                    [partial(_epoch, local, None), partial(_epoch, remote, None)], r
                )
                ratios.append(cached / disk)
                table.add_row(str(r + 1), f"{disk:,.0f}", f"{cold:,.0f}", f"{cached:,.0f}",
                              f"{cached / disk:.2f}x")  # fmt: skip
    console.print(table)
    median = statistics.median(ratios)
    console.print(f"stream: median store (cached) / disk {median:.2f}x (target >= 0.8x)")
    return median


def upload(lake: Path, store: Store) -> int:
    """Copy every file of the local `lake` into `store` under the same keys; returns the count."""
    files = list(lake.rglob("*.parquet"))
    for path in files:
        data = path.read_bytes()
        store.write_bytes(str(path.relative_to(lake)), data)
    return len(files)


def bench_query(
    settings: Settings, rows: int, files: int, repeats: int, rounds: int, console: Console
) -> float:
    table = Table("round", "lake", "connect s", "cold s", "warm median s")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        many, _ = generate(Path(tmp), rows, files, seed=7)
        store = Store.at(settings.storage(f"s3://flywheel/bench/query-{uuid.uuid4().hex[:8]}"))
        console.print(f"query: {upload(many, store)} files, {rows:,} rows, uploaded to {store}")
        for r in range(rounds):
            timings = {}
            for name, lake in (("disk", many), ("store", store))[:: 1 if r % 2 == 0 else -1]:
                connect_s, cold_s, runs, result = time_query(lake, repeats)
                timings[name] = (statistics.median(runs), result)
                table.add_row(
                    str(r + 1), name, f"{connect_s:.2f}", f"{cold_s:.2f}",
                    f"{statistics.median(runs):.3f}",
                )  # fmt: skip
            assert timings["disk"][1] == timings["store"][1] or _close(timings)
            ratios.append(timings["store"][0] / timings["disk"][0])
    console.print(table)
    median = statistics.median(ratios)
    console.print(f"query: median store / disk {median:.2f}x (target <= 2x)")
    return median


def _close(timings: dict[str, tuple[float, list[tuple[object, ...]]]]) -> bool:
    """Float sums may differ in the last bits with the order rows arrive in."""
    rounded = [
        [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in result]
        for _, result in timings.values()
    ]
    return rounded[0] == rounded[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="sink: events per round")
    parser.add_argument("--rows", type=int, default=2_000_000, help="query: rows in the lake")
    parser.add_argument("--files", type=int, default=240, help="query: files in the lake")
    parser.add_argument("--repeats", type=int, default=5, help="query: warm runs per lake")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=20_000, help="stream: samples per window")
    parser.add_argument("--only", choices=("sink", "stream", "query"), default=None)
    args = parser.parse_args()
    console = Console()
    settings = Settings.from_env()
    ensure_infrastructure(settings, lambda _: None)
    started = time.perf_counter()
    if args.only in (None, "sink"):
        bench_sink(settings, make_codec(settings), args.events, args.rounds, console)
    if args.only in (None, "stream"):
        bench_stream(settings, args.samples, args.rounds, console)
    if args.only in (None, "query"):
        bench_query(settings, args.rows, args.files, args.repeats, args.rounds, console)
    console.print(f"done in {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
