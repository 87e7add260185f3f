"""Erasure reaches every lake table with a user's rows, against the real broker and registry.

Events of a target user and of another user go through Kafka into every topic whose schema has
`user_id` (found by scanning the schemas, so a new table with `user_id` fails here until it has
events below and erasure covers it), and into the topics whose rows are a user's through their
ids (outcomes, edits, test runs, feature updates); the sink lands them; `flywheel privacy erase`
runs; then no table but the erasure record holds a row of the target user or one of their ids,
the other user's rows are all there, the files still tile each partition and the sink resumes
where it was (it writes nothing more).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from contracts.lake_layout import scan_topic
from flywheel.privacy import erase_everywhere
from flywheel.settings import Settings
from processors.lake import LakeSink
from schemas.catalog import load_schema
from schemas.enums import Outcome, RewardSource
from schemas.events import (
    EditObserved,
    Event,
    FeatureUpdate,
    Reward,
    SuggestionOutcome,
    TestRunCompleted,
)
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topics import ERASURES_TOPIC, TOPIC_VALUE_SCHEMAS, TopicSpec
from tests.flywheel.test_privacy_integration import _read
from tests.processors.lake.lake_harness import assert_ranges_tile, last_offsets, produce
from tests.sample_events import PRODUCER, offered, reacted, served

pytestmark = pytest.mark.integration

EVENT_TOPIC = {schema: topic for topic, schema in TOPIC_VALUE_SCHEMAS.items()}
# Tables whose rows are a user's through ids only (no user_id column).
LINKED_TABLES = ("telemetry.outcomes", "telemetry.edits", "telemetry.tests", "features.updates")


def user_id_tables() -> set[str]:
    """Every platform topic whose value schema has a `user_id` field."""
    return {
        topic
        for topic, schema in TOPIC_VALUE_SCHEMAS.items()
        if "user_id" in {f["name"] for f in load_schema(schema)["fields"]}
    }


def _activity(user: str, tag: str, at: datetime) -> list[Event]:
    """One user's events in every table that can hold them: an editor session with a suggestion
    and what followed, a completion served to the user and one served to an API client that
    named no user (the user reacted to it), their Rewards, and the user's feature values."""
    session = f"sess-{tag}"
    offer = offered(session, user_id=user, event_time=at)
    named = served(f"agent-{tag}", user_id=user, event_time=at)
    anonymous = served(f"api-{tag}", user_id=None, event_time=at)
    events: list[Event] = [
        offer,
        SuggestionOutcome(
            producer=PRODUCER, suggestion_id=offer.suggestion_id, session_id=session,
            outcome=Outcome.ACCEPTED, accepted_chars=4, time_to_decision_ms=900, event_time=at,
        ),
        EditObserved(
            producer=PRODUCER, session_id=session, suggestion_id=offer.suggestion_id,
            chars_inserted=3, chars_deleted=1, event_time=at,
        ),
        TestRunCompleted(
            producer=PRODUCER, session_id=session, run_id=f"run-{tag}", tests_passed=1,
            tests_failed=0, tests_errored=0, duration_ms=10,
            suggestion_ids=(offer.suggestion_id,), event_time=at,
        ),
        named, reacted(named), anonymous, reacted(anonymous, user_id=user),
        FeatureUpdate(
            producer=PRODUCER, entity_type="user_language", entity_id=f"{user}@python",
            feature_name="accept_rate_24h", window="24h", value=0.5, as_of=at,
            source_event_count=1, event_time=at,
        ),
    ]  # fmt: skip
    for source, sid, s, u in (
        (RewardSource.SUGGESTION, offer.suggestion_id, session, user),
        (RewardSource.COMPLETION, named.completion_id, named.session_id, user),
        (RewardSource.COMPLETION, anonymous.completion_id, anonymous.session_id, None),
    ):
        events.append(Reward(
            producer=PRODUCER, reward_id=f"rw-{sid}", source=source, source_id=sid,
            session_id=s, user_id=u, model_name="m", model_version=1, reward=0.5,
            reward_components={}, reward_fn="tab@1", attributed_at=at, event_time=at,
        ))  # fmt: skip
    return events


def _ids(events: list[Event]) -> set[str]:
    """The user's pseudonym and every session, suggestion and completion id of `events`."""
    names = ("user_id", "session_id", "suggestion_id", "completion_id")
    return {v for e in events for n in names if isinstance(v := getattr(e, n, None), str)}


def _rename_tables(lake: Path, names: dict[str, str]) -> None:
    """Move lake tables (directories and file names) from one topic name to another, offsets
    unchanged. Erasure reads the platform's table names; the test's topics are per-test copies,
    so the sunk tables are renamed to the platform's names for the erasure and back after."""
    for old, new in names.items():
        if not (lake / old).is_dir():
            continue
        for path in sorted((lake / old).rglob("*.parquet")):
            path.rename(path.with_name(new + path.name.removeprefix(old)))
        (lake / old).rename(lake / new)


def _tables(lake: Path, topics: list[str]) -> dict[str, list[str]]:
    """Per table, every row (as text, platform columns only), sorted."""
    out = {}
    for topic in topics:
        rows = [
            repr({k: v for k, v in row.items() if not k.startswith("_")})
            for path in sorted((lake / topic).rglob("*.parquet"))
            for row in pq.read_table(path).to_pylist()
        ]
        out[topic] = sorted(rows)
    return out


def test_erase_leaves_no_row_of_the_user_in_any_table_and_the_sink_resumes_unchanged(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    covered = {*user_id_tables(), *LINKED_TABLES} - {ERASURES_TOPIC}
    victim, other = f"user:victim-{unique}", f"user:other-{unique}"
    at = datetime.now(UTC) - timedelta(minutes=5)
    events = {
        user: [e for k in range(3) for e in _activity(user, f"{user}-{k}", at)]
        for user in (victim, other)
    }
    produced_in = {EVENT_TOPIC[e.SCHEMA_NAME] for es in events.values() for e in es}
    assert covered <= produced_in, f"no events for {covered - produced_in}: add them above"

    copy = {t: f"{unique}.{t}" for t in [*sorted(produced_in), ERASURES_TOPIC]}
    sink_dlq, dlq = f"{unique}.sink-dlq", f"{unique}.dlq"
    TopicAdmin(stack.kafka_client_config()).ensure(
        [TopicSpec(name, "k", "v", 4) for t, name in copy.items() if t != ERASURES_TOPIC]
        + [TopicSpec(copy[ERASURES_TOPIC], "k", "v", 1, "compact", None)]
        + [TopicSpec(d, "k", "v", 1) for d in (sink_dlq, dlq)]
    )
    codec = AvroCodec.for_url(stack.registry_url)
    key: Callable[[Event], bytes] = lambda e: str(  # noqa: E731
        getattr(e, "session_id", None) or getattr(e, "entity_id", "")
    ).encode()
    items = [
        (copy[EVENT_TOPIC[e.SCHEMA_NAME]], key(e), codec.encode(EVENT_TOPIC[e.SCHEMA_NAME],
                                                                e.to_record()))
        for es in events.values() for e in es
    ]  # fmt: skip
    # Dead letters (with the origin header the platform's stages set): a completion of each
    # user whose body did not decode (found by its session key) and a feedback event that did
    # (found by its user_id).
    letters = Producer(stack.kafka_client_config())
    for es in events.values():
        completion = next(e for e in es if e.SCHEMA_NAME == "AgentCompletion" and e.user_id)
        body = codec.encode("agent.feedback", reacted(completion).to_record())
        for k, value, origin in (
            (completion.session_id.encode(), b"\x07junk", b"agent.completions"),
            (b"other-key", body, b"agent.feedback"),
        ):
            letters.produce(dlq, value, k, headers=[("flywheel.topic", origin)])
    assert letters.flush(30) == 0
    produced = produce(stack, items)

    settings = dataclasses.replace(stack, lake_uri=str(tmp_path / "lake"), home=tmp_path / "home")
    lake = settings.lake
    tables = [copy[t] for t in sorted(produced_in)]

    def run_sink() -> int:
        sink = LakeSink(
            stack.kafka_client_config(), codec, lake, list(copy.values()),
            group_id=f"{unique}.sink", decode_as={v: k for k, v in copy.items()},
            dlq_topic=sink_dlq,
        )  # fmt: skip
        return sink.run(threading.Event(), until_caught_up=True).rows

    assert run_sink() == len(events[victim]) + len(events[other])
    before = _tables(lake, tables)
    resume = {t: scan_topic(lake, t).resume_offsets() for t in tables}
    victim_ids = _ids(events[victim])
    assert all(any(i in r for r in before[copy[t]] for i in victim_ids) for t in covered)

    _rename_tables(lake, {v: k for k, v in copy.items()})
    report = erase_everywhere(
        settings, victim, dlq_topics=[dlq], erasures_topic=copy[ERASURES_TOPIC]
    )
    _rename_tables(lake, dict(copy))

    after = _tables(lake, tables)
    for table in tables:
        mine = [r for r in after[table] if any(i in r for i in victim_ids)]
        assert mine == [], (table, mine[:2])
        theirs = [r for r in before[table] if not any(i in r for i in victim_ids)]
        assert after[table] == theirs, table  # the other user's rows, all of them, unchanged
    other_ids = _ids(events[other])
    assert all(any(i in r for r in after[copy[t]] for i in other_ids) for t in covered)
    assert sum(report.rows_removed.values()) == len(events[victim])
    assert set(report.rows_removed) >= covered
    assert report.dead_letters_removed == {dlq: 2}
    letters = _read(stack, dlq)
    assert len(letters) == 2 and all(victim.encode() not in (v or b"") for _, v, _ in letters)

    # Same file names and ranges: the files tile each partition and the sink resumes where it
    # was; run again, it lands only the erasure record.
    for table in tables:
        assert scan_topic(lake, table).resume_offsets() == resume[table], table
        assert_ranges_tile(lake, table, last_offsets(produced, table))
    assert run_sink() == 1
    (record,) = [
        row
        for path in (lake / copy[ERASURES_TOPIC]).rglob("*.parquet")
        for row in pq.read_table(path).to_pylist()
    ]
    assert record["user_id"] == victim and record["erasure_id"] == report.erasure_id
    assert _tables(lake, tables) == after
