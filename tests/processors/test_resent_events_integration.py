"""Exactly once by event_id, end to end: events the SDK re-sends from its spool after lost acks
are one row each in the lake's views and one contribution each to the Rewards.

The broker is frozen (SIGSTOP) while the SDK sends, longer than the client waits, so the client
never gets the acks and spools the events; thawed, the broker appends the requests it had
already received, and the next client re-sends the spool: the same events sit twice in Kafka.
A joiner and a lake sink of the test's own (groups started at the inputs' ends, own outputs)
then run on them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from analytics import Catalog
from flywheel.clients import telemetry_client
from flywheel.settings import Settings
from processors.rewards.attribution import reward_id
from schemas.enums import Outcome
from schemas.events import Event, SuggestionOutcome
from streams.admin import TopicAdmin
from streams.lag import start_group_at_end
from streams.stack.local import LocalStack
from streams.topics import ROLLOUTS_TOPIC, TELEMETRY_TOPICS, TopicSpec
from tests.processors.joiner.test_joiner_worker import read_after_restart, rewards_by_id
from tests.readback import end_offsets, read_events
from tests.sample_events import PRODUCER, offered

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LAKE_TOPICS = ("telemetry.suggestions", "telemetry.outcomes")
N = 40  # suggestions, each offered and accepted


def _events(session: str) -> tuple[list[Event], dict[str, float]]:
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    events: list[Event] = []
    expected = {}
    for i in range(N):
        offer = offered(session, event_time=t0 + timedelta(milliseconds=10 * i), request_id=f"r{i}")
        accepted = SuggestionOutcome(
            producer=PRODUCER, event_time=offer.event_time + timedelta(milliseconds=300),
            suggestion_id=offer.suggestion_id, session_id=session, outcome=Outcome.ACCEPTED,
            accepted_chars=offer.suggestion_chars, time_to_decision_ms=300,
        )  # fmt: skip
        events += [offer, accepted]
        expected[reward_id(offer.suggestion_id, "tab@1")] = 0.75
    return events, expected


def _tick(session: str) -> SuggestionOutcome:
    """An outcome of no offer a minute after the others: moves the watermark past them."""
    return SuggestionOutcome(
        producer=PRODUCER, event_time=datetime.now(UTC) + timedelta(minutes=1),
        suggestion_id=str(uuid.uuid4()), session_id=session, outcome=Outcome.REJECTED,
        accepted_chars=0, time_to_decision_ms=1,
    )  # fmt: skip


def _flywheel(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "flywheel", *args], cwd=ROOT, stdout=out, stderr=out
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_events_resent_after_lost_acks_count_once_in_lake_views_and_rewards(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    if not stack.uses_local_stack:
        pytest.skip("needs the local stack: the test freezes its broker")
    session = f"s-{uuid.uuid4()}"
    events, expected = _events(session)
    ids = [e.event_id for e in events]
    config = stack.kafka_client_config()
    rewards, dlq_late, dlq_joiner = (f"{unique}.{t}" for t in ("rewards", "late", "joiner"))
    TopicAdmin(config).ensure(
        [TopicSpec(rewards, "session_id", "test", 4)]
        + [TopicSpec(t, "original key", "test", 1) for t in (dlq_late, dlq_joiner)]
    )
    start_group_at_end(config, f"{unique}.joiner", [*TELEMETRY_TOPICS, ROLLOUTS_TOPIC])
    since = end_offsets(stack, LAKE_TOPICS)

    client = telemetry_client(stack, name="test", spool_dir=tmp_path / "spool", close_timeout_s=3)
    for event in events[: N // 2]:
        client.send(event)
    assert client.flush(30) == 0  # the first half is acked
    broker = LocalStack(stack.home, stack.ports).kafka.process.running_pid()
    assert broker is not None
    os.kill(broker, signal.SIGSTOP)  # requests reach its socket; no ack comes back
    try:
        for event in events[N // 2 :]:
            client.send(event)
        time.sleep(1)  # the producer writes its requests to the broker's socket
        stats = client.close()
    finally:
        os.kill(broker, signal.SIGCONT)
    assert stats.spooled == len(events) - N // 2
    with telemetry_client(stack, name="test", spool_dir=tmp_path / "spool") as resender:
        assert resender.stats.resent == stats.spooled
        assert resender.flush(60) == 0

    copies = Counter(str(r.record["event_id"]) for r in read_events(stack, LAKE_TOPICS, ids, since))
    assert set(copies) == set(ids)
    assert max(copies.values()) == 2, "the frozen broker appended no re-sent event twice"

    lake = tmp_path / "lake"
    joiner = _flywheel(
        "process", "--group", f"{unique}.joiner", "--rewards-topic", rewards,
        "--late-dlq-topic", dlq_late, "--dlq-topic", dlq_joiner, "--outcome-window", "2s",
        "--edits-window", "2s", "--tests-window", "2s", "--allowed-lateness", "1s",
        "--idle-after", "0", "--status-every", "1s", log=tmp_path / "joiner.log",
    )  # fmt: skip
    sink = _flywheel(
        "sink", "--topic", ",".join(LAKE_TOPICS), "--lake", str(lake), "--group",
        f"{unique}.sink", "--instance-id", f"{unique}.sink-0", "--dlq-topic", dlq_joiner,
        "--max-age", "1s", log=tmp_path / "sink.log",
    )  # fmt: skip
    try:
        time.sleep(5)  # both have joined their groups
        with telemetry_client(stack, name="tick", spool_dir=tmp_path / "tick") as ticker:
            ticker.send(_tick(session))
            assert ticker.flush(30) == 0
        got = read_after_restart(stack, rewards, len(expected))
        assert rewards_by_id(got) == expected  # every suggestion accepted
        assert len(got) == len(expected), "a re-sent event made a second Reward"
        deadline = time.monotonic() + 120
        with duckdb.connect() as con:
            while time.monotonic() < deadline:
                counts = _lake_counts(lake, ids)
                if sum(counts.values()) >= len(ids):
                    break
                time.sleep(2)
            raw = con.sql(
                f"select event_id, count(*) from read_parquet('{lake}/*/**/*.parquet') "
                "group by event_id having count(*) > 1"
            ).fetchall()
    finally:
        _stop(joiner)
        _stop(sink)
    assert counts == dict.fromkeys(ids, 1)  # one row per event in the views
    assert {str(event_id) for event_id, _ in raw} & set(ids)  # the files hold the copies


def _lake_counts(lake: Path, ids: list[str]) -> dict[str, int]:
    """Rows per event id in the lake's views (the catalog refreshes itself)."""
    if not lake.exists():
        return {}
    wanted = set(ids)
    counts: dict[str, int] = {}
    with Catalog(lake).connect() as con:
        for view in ("telemetry_suggestions", "telemetry_outcomes"):
            for event_id, n in con.sql(
                f"select event_id::varchar, count(*) from {view} group by all"
            ).fetchall():
                if str(event_id) in wanted:
                    counts[str(event_id)] = int(n)
    return counts
