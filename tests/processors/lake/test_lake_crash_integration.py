"""Exactly once under crashes: SIGKILL the sink at random moments while events arrive.

The sink runs as `python -m flywheel sink`, writing to a lake on local disk or in the local
stack's object store (S3Proxy, over HTTP). While a producer
writes 20k events, the sink is killed several times and restarted; a last `--once` run drains
the rest. Then the lake must hold every event exactly once, per partition the files must tile
the log, and no reader may ever have seen a partial or temporary file.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition

from contracts.lake_layout import parse_file_name
from flywheel.settings import Settings
from ground.store import Store
from streams.serde import AvroCodec
from tests.processors.lake.lake_harness import (
    MakeTopics,
    Produced,
    assert_ranges_tile,
    lake_rows,
    last_offsets,
    produce,
)
from tests.sample_events import offered

pytestmark = pytest.mark.integration
SCHEMA_TOPIC = "telemetry.suggestions"
EVENTS = 20_000
CHUNK = 1000
KILLS = 4
PACE_S = 0.5
REPO = Path(__file__).resolve().parents[3]


class LakeWatcher(threading.Thread):
    """Looks at the lake like a reader every few ms: each `*.parquet` it lists must be a
    complete Parquet file with a lake name."""

    def __init__(self, lake: Store) -> None:
        super().__init__(daemon=True)
        self.lake = lake
        self.stop = threading.Event()
        self.looks = 0
        self.seen: set[str] = set()
        self.problems: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            for stored in self.lake.files():
                if not stored.key.endswith(".parquet") or stored.key in self.seen:
                    continue
                if parse_file_name(stored.key) is None:
                    self.problems.append(f"not a lake file name: {stored.name}")
                try:
                    # The footer comes last: a partial file has none.
                    with self.lake.fs.open_input_file(self.lake.path(stored.key)) as data:
                        pq.read_metadata(data)
                    self.seen.add(stored.key)
                except FileNotFoundError:
                    pass  # replaced by a rewrite of the same range between listing and open
                except Exception as exc:
                    self.problems.append(f"{stored.name}: {exc!r}")
            self.looks += 1
            time.sleep(0.005)


@pytest.fixture(params=["disk", "object-store"])
def lake(request: pytest.FixtureRequest, stack: Settings, tmp_path: Path, unique: str) -> Store:
    """An empty lake: a local directory, or a fresh prefix in the local stack's object store."""
    if request.param == "disk":
        (tmp_path / "lake").mkdir()
        return Store.at(tmp_path / "lake")
    if not stack.uses_local_stack:
        pytest.skip("an external cluster is configured: there is no local object store")
    return Store.at(stack.storage(f"s3://flywheel/{unique}/lake"))


def sink_command(topic: str, lake: Store, dlq: str, *, once: bool = False) -> list[str]:
    return [
        sys.executable, "-m", "flywheel", "sink", "--topic", f"{topic}=telemetry.suggestions",
        "--lake", lake.location.uri, "--group", f"{topic}.sink",
        "--instance-id", f"{topic}.sink-1", "--dlq-topic", dlq, "--max-rows", "1500",
        "--max-age", "300ms", "--status-every", "1s", *(["--once"] if once else []),
    ]  # fmt: skip


def test_the_lake_holds_each_event_once_after_sigkills(
    stack: Settings, codec: AvroCodec, make_topics: MakeTopics, tmp_path: Path, lake: Store
) -> None:
    topic, dlq = make_topics("events", "dlq")
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    sessions = [f"s-{i % 101}" for i in range(EVENTS)]
    values = [
        (topic, s.encode(), codec.encode("telemetry.suggestions", offered(s).to_record()))
        for s in sessions
    ]
    produced: list[Produced] = []

    def paced() -> Iterator[tuple[str, bytes | None, bytes | None]]:
        for index, item in enumerate(values):
            if index and index % CHUNK == 0:
                time.sleep(PACE_S)  # ~10 s in all: every kill lands while data arrives
            yield item

    def paced_producer() -> None:
        produced.extend(produce(stack, paced()))

    watcher = LakeWatcher(lake)
    watcher.start()
    producer = threading.Thread(target=paced_producer)
    producer.start()
    logs = tmp_path / "sink.log"
    files_at_kills: list[int] = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with logs.open("ab") as log:
        for _ in range(KILLS):
            before = len(watcher.seen)
            process = subprocess.Popen(
                sink_command(topic, lake, dlq), cwd=REPO, env=env, stdout=log, stderr=log
            )
            # Kill at a random moment after the sink's first new file: mid-stream, not mid-start.
            deadline = time.monotonic() + 20
            while (
                len(watcher.seen) == before and producer.is_alive() and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 1.0))
            assert process.poll() is None, f"the sink exited early; see {logs}"
            process.send_signal(signal.SIGKILL)
            process.wait()
            files_at_kills.append(len(watcher.seen) - before)
        print(f"files written before each kill: {files_at_kills} (seed {seed})")
        producer.join()
        drained = subprocess.run(
            sink_command(topic, lake, dlq, once=True),
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=log,
            timeout=120,
        )
    watcher.stop.set()
    watcher.join()
    context = f"seed {seed}; sink output in {logs}"
    assert drained.returncode == 0, context

    assert watcher.problems == [], context
    assert watcher.looks > 100
    # Most kills hit a sink at work (it had written files), not one starting up.
    assert sum(1 for n in files_at_kills if n) >= KILLS - 1, (files_at_kills, context)
    ids = [r[0] for r in lake_rows(lake, topic)]
    assert len(ids) == len(set(ids)) == EVENTS, context
    assert {str(i) for i in ids} == {
        str(p.value and codec.decode("telemetry.suggestions", p.value)["event_id"])
        for p in produced
    }
    assert_ranges_tile(lake, topic, last_offsets(produced, topic))
    leftovers = [f.key for f in lake.files() if f.key.endswith(".tmp")]
    assert leftovers == [], "orphan temp files must be removed on restart"


def test_sigterm_writes_the_buffers_and_commits_before_exiting(
    stack: Settings, codec: AvroCodec, make_topics: MakeTopics, tmp_path: Path, unique: str
) -> None:
    topic, dlq = make_topics("events", "dlq")
    records = [offered(f"s-{i}").to_record() for i in range(500)]
    items = [(topic, r["session_id"].encode(), codec.encode(SCHEMA_TOPIC, r)) for r in records]
    ends = last_offsets(produce(stack, items), topic)
    lake = Store.at(tmp_path / "lake")
    command = sink_command(topic, lake, dlq)
    command[command.index("--max-age") + 1] = "10m"  # nothing becomes a file by age
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:  # a status line a second; stop once all 500 are buffered
        lines.append(line)
        if line.startswith("500 read"):
            break
    assert lake.files() == []  # all still in memory
    process.send_signal(signal.SIGTERM)
    rest, _ = process.communicate(timeout=30)
    output = "".join(lines) + rest
    assert process.returncode == 0, output
    assert "sink stopped: 500 rows" in output
    assert len(lake_rows(lake, topic)) == 500
    assert_ranges_tile(lake, topic, ends)
    consumer = Consumer({**stack.kafka_client_config(), "group.id": f"{topic}.sink"})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == {
        p: last + 1 for p, last in ends.items()
    }
