"""Compaction while the sink writes and is SIGKILLed: every offset exactly once, same answers.

Events of six past hours arrive in hour blocks (with a few late events of other hours in
between, which break runs) while the sink, with small rotation limits, writes many small files
and is killed and restarted; a compactor merges the three oldest hours over and over meanwhile.
After a last draining sink run, `flywheel lake compact` merges everything closed. The lake must
then hold each produced offset once, the views must answer as before that last compaction, and
an erasure must remove exactly the user's rows.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.topic_views import parquet_sql
from contracts.lake_layout import file_path, hour_of, parse_hour_dir, range_problems, scan_topic
from flywheel.settings import Settings
from processors.lake.compaction import compact_lake
from processors.lake.erasure import erase_user
from streams.serde import AvroCodec
from streams.topics import SUGGESTIONS_TOPIC
from tests.processors.lake.lake_harness import MakeTopics, Produced, last_offsets, produce
from tests.sample_events import offered

pytestmark = pytest.mark.integration
HOURS = 6
PER_HOUR = 1000
USERS = ("user:" + "a" * 32, "user:" + "b" * 32, "user:" + "c" * 32)
REPO = Path(__file__).resolve().parents[3]


def sink_command(topic: str, lake: Path, dlq: str, *, once: bool = False) -> list[str]:
    return [
        sys.executable, "-m", "flywheel", "sink", "--topic", f"{topic}={SUGGESTIONS_TOPIC}",
        "--lake", str(lake), "--group", f"{topic}.sink",
        "--instance-id", f"{topic}.sink-1", "--dlq-topic", dlq, "--max-rows", "60",
        "--max-age", "300ms", "--status-every", "1s", *(["--once"] if once else []),
    ]  # fmt: skip


def _values(codec: AvroCodec, topic: str, now: datetime) -> list[tuple[str, bytes, bytes]]:
    start = datetime.fromtimestamp((hour_of(now) - HOURS - 1) * 3600, UTC)
    rng = random.Random(7)
    items = []
    for k in range(HOURS * PER_HOUR):
        hour = k // PER_HOUR if k % 250 else rng.randrange(HOURS)  # a late event now and then
        when = start + timedelta(hours=hour, seconds=rng.randrange(3600))
        session = f"s-{k % 97}"
        event = offered(session, user_id=USERS[k % 3], event_time=when)
        items.append((topic, session.encode(), codec.encode(SUGGESTIONS_TOPIC, event.to_record())))
    return items


def _answers(lake: Path, topic: str) -> tuple[object, ...]:
    view = parquet_sql(lake.resolve(), topic)
    with duckdb.connect() as con:
        count = con.execute(f"select count(*), count(distinct event_id) from ({view})").fetchone()
        groups = con.execute(
            f"select user_id, hour, count(*) from ({view}) group by all order by all"
        ).fetchall()
    return count, groups


def test_compaction_while_the_sink_writes_and_dies_keeps_every_offset_once(
    stack: Settings, codec: AvroCodec, make_topics: MakeTopics, tmp_path: Path
) -> None:
    topic, dlq = make_topics("events", "dlq")
    lake = tmp_path / "lake"
    lake.mkdir()
    now = datetime.now(UTC)
    values = _values(codec, topic, now)
    produced: list[Produced] = []

    def paced() -> None:
        for block in range(0, len(values), 500):
            produced.extend(produce(stack, values[block : block + 500]))
            time.sleep(0.3)  # ~4 s in all: the kills land while data arrives

    stop = threading.Event()
    compactions: list[int] = []
    failures: list[BaseException] = []

    def compactor() -> None:
        while not stop.is_set():
            try:  # the three oldest hours are closed for 3 h; the sink still writes late events
                report = compact_lake(lake, [topic], min_age_s=3 * 3600, now=datetime.now(UTC))
                compactions.append(report.topics[topic].runs)
            except BaseException as exc:
                failures.append(exc)
                return
            time.sleep(0.1)

    producer = threading.Thread(target=paced)
    background = threading.Thread(target=compactor)
    producer.start()
    background.start()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log_path = tmp_path / "sink.log"
    with log_path.open("ab") as log:
        for _ in range(2):
            sink = subprocess.Popen(
                sink_command(topic, lake, dlq), cwd=REPO, env=env, stdout=log, stderr=log
            )
            time.sleep(random.uniform(2.0, 3.5))
            assert sink.poll() is None, f"the sink exited early; see {log_path}"
            sink.send_signal(signal.SIGKILL)
            sink.wait()
        producer.join()
        drained = subprocess.run(
            sink_command(topic, lake, dlq, once=True), cwd=REPO, env=env, stdout=log,
            stderr=log, timeout=180,
        )  # fmt: skip
    stop.set()
    background.join()
    assert drained.returncode == 0, f"see {log_path}"
    assert failures == []
    assert sum(compactions) > 0, compactions  # it merged while the sink wrote

    ends = last_offsets(produced, topic)
    before = _answers(lake, topic)
    files_before = sum(map(len, scan_topic(lake, topic).files.values()))
    result = subprocess.run(
        [sys.executable, "-m", "flywheel", "lake", "compact", "--lake", str(lake), "--topic",
         topic, "--min-age", "0s", "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    print(f"runs merged while the sink wrote: {sum(compactions)}; files {row}")
    assert row["files_before"] == files_before > row["files_after"]

    scan = scan_topic(lake, topic)
    assert scan.superseded == {} and scan.temps == {}
    assert sorted(scan.files) == sorted(ends)
    for partition, last in ends.items():
        assert range_problems(scan.files[partition], start=0) == []
        assert scan.files[partition][-1].last == last
    assert _answers(lake, topic) == before
    (count, distinct), groups = before
    assert count == distinct == len(produced) == HOURS * PER_HOUR
    with duckdb.connect() as con:
        offsets = con.execute(
            f"select _partition, _offset from ({parquet_sql(lake.resolve(), topic)})"
        ).fetchall()
    assert sorted(offsets) == sorted((p.partition, p.offset) for p in produced)

    # Erasure on the compacted files, under the platform topic it is defined for.
    platform = tmp_path / "platform-lake"
    for files in scan.files.values():
        for f in files:
            hour = parse_hour_dir(Path(f.path).parent)
            assert hour is not None
            target = file_path(platform, SUGGESTIONS_TOPIC, f.partition, f.first, f.last, hour)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f.path, target)
    report = erase_user(platform, USERS[0])
    victim_rows = sum(n for user, _, n in groups if user == USERS[0])  # type: ignore[misc]
    assert report.rows_removed[SUGGESTIONS_TOPIC] == victim_rows > 0
    left = _answers(platform, SUGGESTIONS_TOPIC)[1]
    assert left == [g for g in groups if g[0] != USERS[0]]  # type: ignore[index]
