"""Benchmark: lake sink rows/s vs raw decode + pyarrow write, and event-time -> lake latency.

Throughput: a topic is pre-filled with SuggestionOffered events (SDK-like: one per request,
with code text). The sink (`LakeSink`: consume, decode, validate, buffer, Parquet, fsync,
rename, commit) drains it; the baseline decodes the *same bytes* with fastavro and writes the
same Parquet (zstd, 50k-row files) with pyarrow, no Kafka, no validation, no durability. Both run
in this process, one after the other, per round; the figure that matters is the ratio (the
machine is shared and noisy). The clock starts at the sink's first message, so joining the group
is not counted.

Latency: a paced producer sends events stamped with the current time while a `python -m
processors.lake` subprocess sinks them; a watcher notes when each file becomes visible, and each
row's latency is (file visible) - (event_time). It is dominated by the sink's `--max-age`.

    .venv/bin/python -m bench.pipeline_sink --events 100000 --rounds 3 --rate 2000 --paced-s 20
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from bench.raw_producer import produce_all
from contracts.arrow_schema import arrow_schema
from flywheel.clients import codec as make_codec
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from ground.store import Store
from processors.lake import LakeSink, RotationLimits
from schemas.catalog import load_schema, parsed_schema
from streams.admin import TopicAdmin
from streams.serde import HEADER, AvroCodec
from streams.topics import TopicSpec
from tests.sample_events import offered

SCHEMA_TOPIC = "telemetry.suggestions"
FILE_ROWS = 50_000
TEXT = "def add(a, b):\n    return a + b\n"


def make_values(codec: AvroCodec, n: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(n):
        session = f"s-{i % 997}"
        event = offered(session, suggestion_id=f"sg-{i}", request_id=f"r-{i}", suggestion_text=TEXT)
        out.append((session.encode(), codec.encode(SCHEMA_TOPIC, event.to_record())))
    return out


def make_topics(settings: Settings, topic: str) -> None:
    """`topic` (4 partitions, like telemetry) and its DLQ, deleted by retention after an hour."""
    hour_ms = 3_600_000
    TopicAdmin(settings.kafka_client_config()).ensure(
        [
            TopicSpec(topic, "session_id", "SuggestionOffered", 4, retention_ms=hour_ms),
            TopicSpec(f"{topic}.dlq", "original key", "dead letters", 1, retention_ms=hour_ms),
        ]
    )


def fill_topic(settings: Settings, topic: str, values: list[tuple[bytes, bytes]]) -> None:
    config = {
        **settings.kafka_client_config(),
        "linger.ms": 20,
        "compression.type": "zstd",
        "partitioner": "murmur2_random",
    }
    produce_all(config, ((topic, key, value) for key, value in values))


def filled_topic(settings: Settings, values: list[tuple[bytes, bytes]], prefix: str) -> str:
    """A fresh topic `<prefix>.<hex>` (and its DLQ) holding `values`; returns its name."""
    topic = f"{prefix}.{uuid.uuid4().hex[:8]}"
    make_topics(settings, topic)
    fill_topic(settings, topic, values)
    return topic


def sink_rate(
    settings: Settings, codec: AvroCodec, topic: str, dlq: str, lake: Path | Store
) -> float:
    """Rows/s of the sink draining `topic`, from its first message to its last commit."""
    sink = LakeSink(
        settings.kafka_client_config(),
        codec,
        lake,
        [topic],
        group_id=f"{topic}.{uuid.uuid4().hex}",
        decode_as={topic: SCHEMA_TOPIC},
        dlq_topic=dlq,
        limits=RotationLimits(max_rows=FILE_ROWS),
    )
    while sink.poll_batch() == 0:
        pass
    start = time.perf_counter()  # the first batch's time is not counted; nor are its rows
    first_rows = sink.status.records
    while not sink.caught_up():
        sink.poll_batch()
    status = sink.close()
    return (status.rows - first_rows) / (time.perf_counter() - start)


def baseline_rate(values: list[tuple[bytes, bytes]], out_dir: Path) -> float:
    """Rows/s of fastavro decode + columnar pyarrow + Parquet (zstd) on the same bytes."""
    schema = parsed_schema("SuggestionOffered")
    names = [f["name"] for f in load_schema("SuggestionOffered")["fields"]]
    arrow = arrow_schema(load_schema("SuggestionOffered"))
    start = time.perf_counter()
    for n, chunk_start in enumerate(range(0, len(values), FILE_ROWS)):
        records: list[dict[str, Any]] = []
        for _, value in values[chunk_start : chunk_start + FILE_ROWS]:
            body = io.BytesIO(value)
            body.seek(HEADER.size)
            records.append(fastavro.schemaless_reader(body, schema))  # type: ignore[arg-type]
        columns = {name: [r[name] for r in records] for name in names}
        columns["event_id"] = [str(u) for u in columns["event_id"]]
        arrays = [pa.array(columns[name], arrow.field(name).type) for name in names]
        count = len(records)
        arrays += [
            pa.array(["t"] * count),
            pa.array([0] * count, pa.int32()),
            pa.array(range(count), pa.int64()),
        ]
        pq.write_table(
            pa.Table.from_arrays(arrays, schema=arrow),
            out_dir / f"b{n}.parquet",
            compression="zstd",
        )
    return len(values) / (time.perf_counter() - start)


def throughput(
    settings: Settings, codec: AvroCodec, events: int, rounds: int, console: Console
) -> None:
    values = make_values(codec, events)
    table = Table("round", "baseline rows/s", "sink rows/s", "sink / baseline")
    ratios = []
    for r in range(rounds):
        topic = filled_topic(settings, values, "bench.sink")
        with tempfile.TemporaryDirectory() as tmp:
            base = baseline_rate(values, Path(tmp))
            ours = sink_rate(settings, codec, topic, f"{topic}.dlq", Path(tmp) / "lake")
        ratios.append(ours / base)
        table.add_row(str(r + 1), f"{base:,.0f}", f"{ours:,.0f}", f"{ours / base:.2f}x")
    console.print(table)
    console.print(f"median sink/baseline: {statistics.median(ratios):.2f}x (target >= 0.5x)")


def latency(
    settings: Settings,
    codec: AvroCodec,
    rate: int,
    seconds: float,
    max_age_s: float,
    console: Console,
) -> None:
    topic = f"bench.sink-latency.{uuid.uuid4().hex[:8]}"
    make_topics(settings, topic)
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp)
        options = (
            f"--topic {topic}={SCHEMA_TOPIC} --lake {lake} --group "
            f"{topic}.sink --dlq-topic {topic}.dlq --max-age {max_age_s} --status-every 60s"
        )
        command = [sys.executable, "-m", "flywheel", "sink", *options.split()]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        sink = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        seen: dict[Path, float] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(lake, seen, stop), daemon=True)
        watcher.start()
        # Warm up: one event, until its file is visible (the sink started and joined its group).
        warm_up = _paced_produce(settings, codec, topic, 1, 1.01)
        while not seen and sink.poll() is None:
            time.sleep(0.05)
        warm_files = set(seen)
        sent = _paced_produce(settings, codec, topic, rate, seconds) - warm_up
        deadline = time.monotonic() + max_age_s + 30
        while (
            sum(pq.read_metadata(p).num_rows for p in set(seen) - warm_files) < sent
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        stop.set()
        sink.terminate()
        sink.wait(30)
        latencies = []
        for path, visible_at in seen.items():
            if path in warm_files:
                continue
            times = pq.read_table(path, columns=["event_time"]).column(0).to_pylist()
            latencies += [visible_at - t.timestamp() for t in times]
    latencies.sort()
    table = Table("paced rate", "rows", "max-age-s", "latency p50", "latency p99", "max")
    p50, p99 = _pct(latencies, 50), _pct(latencies, 99)
    table.add_row(
        f"{rate:,}/s",
        f"{len(latencies):,}",
        f"{max_age_s:g}",
        f"{p50:.2f}s",
        f"{p99:.2f}s",
        f"{latencies[-1]:.2f}s",
    )
    console.print(table)


def _paced_produce(
    settings: Settings, codec: AvroCodec, topic: str, rate: int, seconds: float
) -> int:
    producer = Producer(
        {**settings.kafka_client_config(), "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        for _ in range(int(elapsed * rate) - sent):  # catch up to the schedule, stamped now
            session = f"s-{sent % 997}"
            producer.produce(
                topic, codec.encode(SCHEMA_TOPIC, offered(session).to_record()), session.encode()
            )
            sent += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)
    return sent


def _watch(lake: Path, seen: dict[Path, float], stop: threading.Event) -> None:
    while not stop.is_set():
        for path in lake.glob("**/*.parquet"):
            seen.setdefault(path, time.time())
        time.sleep(0.02)


def _pct(sorted_values: list[float], pct: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * pct / 100))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=2000, help="paced events/s for latency")
    parser.add_argument("--paced-s", type=float, default=20.0)
    parser.add_argument("--max-age-s", type=float, default=5.0, help="the sink's rotation age")
    args = parser.parse_args()
    console = Console()
    settings = Settings.from_env()
    ensure_infrastructure(settings, lambda _: None)
    codec = make_codec(settings)
    if args.rounds > 0:
        throughput(settings, codec, args.events, args.rounds, console)
    if args.paced_s > 0:
        latency(settings, codec, args.rate, args.paced_s, args.max_age_s, console)


if __name__ == "__main__":
    main()
