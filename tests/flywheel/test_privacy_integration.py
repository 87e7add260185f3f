"""Erasure across the platform, against the real broker and registry: a planted user leaves 0
rows in the lake, the online features (live and after a replay), the compacted updates topic and
the dead-letter topic, while the other user's rows stay; the erasure is recorded as an event."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from feature_store.declarations import load_features
from feature_store.online import OnlineFeatureStore
from feature_store.processor import FeatureProcessor
from flywheel.privacy import erase_everywhere
from flywheel.settings import Settings
from processors.lake.dlq_erasure import COPIED_FROM
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topics import TopicSpec
from tests.analytics.lake_builder import write_lake
from tests.feature_store.feature_events import MINUTE_MS, T0_MS, reward
from tests.sample_events import offered

pytestmark = pytest.mark.integration

Record = tuple[bytes | None, bytes | None, dict[str, bytes]]


def _read(settings: Settings, topic: str) -> list[Record]:
    """Every record of `topic` from its start (after any deleted head), all partitions to
    their end."""
    consumer = Consumer(
        {**settings.kafka_client_config(), "group.id": f"reader-{uuid.uuid4().hex}",
         "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    at_end: set[int] = set()
    got: list[Record] = []
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                at_end.add(msg.partition() or 0)  # end of that partition
                continue
            at_end.discard(msg.partition() or 0)
            key, value = msg.key(), msg.value()
            assert not isinstance(key, str) and not isinstance(value, str)
            got.append((key, value, dict(msg.headers() or [])))  # type: ignore[arg-type]
    finally:
        consumer.close()
    assert len(at_end) == len(partitions), f"{topic} was not read to its end in 30 s"
    return got


def _poll_until(processor: FeatureProcessor, done: object) -> None:
    deadline = time.monotonic() + 60
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        processor.poll_batch()
    assert done(), "the processor did not get there in 60 s"  # type: ignore[operator]


def test_an_erased_user_leaves_no_row_anywhere_and_others_keep_theirs(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    victim, other = f"user:victim-{unique}", f"user:other-{unique}"
    rewards, updates, erasures, dlq = (f"{unique}.{t}" for t in ("rw", "upd", "era", "dlq"))
    TopicAdmin(stack.kafka_client_config()).ensure(
        [
            TopicSpec(rewards, "k", "v", 4),
            TopicSpec(updates, "k", "v", 4, cleanup_policy="compact", retention_ms=None),
            TopicSpec(erasures, "k", "v", 1, cleanup_policy="compact", retention_ms=None),
            TopicSpec(dlq, "k", "v", 1),
        ]
    )
    settings = dataclasses.replace(stack, lake_uri=str(tmp_path / "lake"))
    codec = AvroCodec.for_url(stack.registry_url)
    sessions = {user: [f"sess-{user}-{k}" for k in range(3)] for user in (victim, other)}

    # The lake: each user's suggestions (they name the user's sessions).
    write_lake(
        settings.lake,
        [offered(s, user_id=user) for user, ss in sessions.items() for s in ss],
        partitions=2,
    )
    # The rewards stream the feature processor reads, and four dead letters: the victim's by
    # key and by body, the other user's likewise.
    producer = Producer({**stack.kafka_client_config(), "partitioner": "murmur2_random"})
    for k in range(30):
        user = (victim, other)[k % 2]
        record = reward(T0_MS + k * MINUTE_MS, user=user, accepted=k % 3 == 0)
        producer.produce(rewards, codec.encode("rewards", record), sessions[user][k % 3].encode())
    for user, n in ((victim, 0), (other, 1)):
        origin: list[tuple[str, str | bytes | None]] = [
            ("flywheel.topic", b"telemetry.suggestions"),
            ("flywheel.cause", b"bad_magic"),
        ]
        producer.produce(dlq, b"\x07junk", sessions[user][0].encode(), headers=origin)
        body = codec.encode("rewards", reward(T0_MS, user=user))
        producer.produce(dlq, body, f"group-{n}".encode(), headers=[("flywheel.topic", b"rewards")])
    producer.flush(30)

    store = OnlineFeatureStore(load_features())
    live = FeatureProcessor(
        stack.kafka_client_config(), codec, store, topics={rewards: "rewards"},
        updates_topic=updates, erasures_topic=erasures, dlq=dlq, flush_every_s=0.1,
    )  # fmt: skip
    _poll_until(live, lambda: live.caught_up() and live.status.records == 30)
    before_other = store.get("user", other)
    assert store.get("user", victim)["user.requests_24h"].value == 15.0

    report = erase_everywhere(settings, victim, dlq_topics=[dlq], erasures_topic=erasures)
    assert report.rows_removed["telemetry.suggestions"] == 3
    assert report.dead_letters_removed == {dlq: 2}

    # Online, live: the victim is gone at once, the other user is untouched.
    _poll_until(live, lambda: live.status.erasures == 1)
    assert all(v.count == 0 for v in store.get("user", victim).values())
    assert all(v.count == 0 for v in store.get("user_language", f"{victim}@python").values())
    assert store.get("user", other) == before_other
    live.close()

    # The compacted updates topic: the victim's latest value per key is a tombstone.
    latest: dict[bytes, bytes | None] = {}
    for key, value, _ in _read(stack, updates):
        assert key is not None
        latest[key] = value
    victims = {k: v for k, v in latest.items() if victim.encode() in k}
    assert victims and all(v is None for v in victims.values())
    assert any(v is not None for k, v in latest.items() if other.encode() in k)

    # A processor replaying the topics (which still hold the victim's rewards) skips them.
    replayed = OnlineFeatureStore(load_features())
    replay = FeatureProcessor(
        stack.kafka_client_config(), codec, replayed, topics={rewards: "rewards"},
        updates_topic=updates, erasures_topic=erasures, dlq=dlq,
    )  # fmt: skip
    _poll_until(replay, replay.caught_up)
    replay.close()
    assert all(v.count == 0 for v in replayed.get("user", victim).values())
    assert replayed.aggregator.erased_dropped == 15
    assert replayed.get("user", other) == before_other

    # Dead letters: only the other user's remain, as copies with their original offsets.
    letters = _read(stack, dlq)
    assert len(letters) == 2
    assert {key for key, _, _ in letters} == {sessions[other][0].encode(), b"group-1"}
    assert all(COPIED_FROM in headers for _, _, headers in letters)

    # The lake: no file holds the victim; the other user's rows are all there.
    text = "".join(
        repr(pq.read_table(p).to_pylist()) for p in sorted(settings.lake.rglob("*.parquet"))
    )
    assert victim not in text and text.count(other) == 6, text  # user_id and session_id

    # The erasure event, on its compacted topic keyed by the user.
    (key, value, _), *rest = _read(stack, erasures)
    assert not rest and key == victim.encode() and value is not None
    event = codec.decode("privacy.erasures", value)
    assert event["erasure_id"] == report.erasure_id and event["rows_removed"] == 3
    assert event["rows_by_topic"][dlq] == 2
