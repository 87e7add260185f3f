"""The sink against the real broker and registry: round trip into the lake, and bad input."""

from __future__ import annotations

import dataclasses
import io
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest

from contracts.lake_layout import scan_topic
from flywheel.settings import Settings
from processors.lake import LakeSink, RotationLimits
from schemas.catalog import parsed_schema
from schemas.enums import ReplicaState
from schemas.events import Event, ReplicaAck
from streams.serde import HEADER, AvroCodec
from streams.topics import TOPIC_VALUE_SCHEMAS
from tests.processors.lake.lake_harness import (
    MakeTopics,
    assert_ranges_tile,
    lake_rows,
    last_offsets,
    produce,
    read_letters,
)
from tests.sample_events import PRODUCER, offered, one_of_each

pytestmark = pytest.mark.integration
KINDS = {  # test topic suffix -> platform topic whose schema it carries
    "suggestions": "telemetry.suggestions",
    "outcomes": "telemetry.outcomes",
    "edits": "telemetry.edits",
    "tests": "telemetry.tests",
    "rollouts": "rollouts.results",
}


def sink(stack: Settings, codec: AvroCodec, lake: Path, topics: dict[str, str], dlq: str,
         **options: object) -> LakeSink:  # fmt: skip
    return LakeSink(
        stack.kafka_client_config(), codec, lake, list(topics), group_id=f"{dlq}.group",
        decode_as=topics, dlq_topic=dlq, **options,  # type: ignore[arg-type]
    )  # fmt: skip


def test_every_sdk_event_kind_lands_once_with_contiguous_ranges_and_hour_directories(
    stack: Settings, codec: AvroCodec, make_topics: MakeTopics, tmp_path: Path
) -> None:
    *topics, dlq = make_topics(*KINDS, "dlq")
    topic_of = dict(zip(KINDS, topics, strict=True))
    schema_topic = {topic_of[k]: v for k, v in KINDS.items()}
    earlier = datetime.now(UTC).replace(minute=30) - timedelta(hours=1)
    items = []
    for i in range(400):  # the first quarter an hour earlier: every partition crosses an hour
        for event in one_of_each(f"s-{i}"):
            if i < 100:
                event = dataclasses.replace(event, event_time=earlier)
            kind = next(k for k, t in KINDS.items() if TOPIC_VALUE_SCHEMAS[t] == event.SCHEMA_NAME)
            key = event.to_record().get("session_id", "g").encode()
            items.append((topic_of[kind], key, codec.encode(KINDS[kind], event.to_record())))
    produced = produce(stack, items)
    lake = tmp_path / "lake"
    status = sink(stack, codec, lake, schema_topic, dlq, limits=RotationLimits(max_rows=150)).run(
        threading.Event(), until_caught_up=True
    )
    assert status.rows == len(items) and sum(status.dead_letters.values()) == 0
    for kind, topic in topic_of.items():
        rows = lake_rows(lake, topic, "event_id, _topic, _partition, _offset, dt, hour")
        ids = [r[0] for r in rows]
        assert len(ids) == len(set(ids)) == 400, kind
        expected = {(p.partition, p.offset) for p in produced if p.topic == topic}
        assert {(r[2], r[3]) for r in rows} == expected
        assert {r[1] for r in rows} == {topic}
        assert {(str(r[4]), r[5]) for r in rows} == {
            (f"{t:%Y-%m-%d}", t.hour) for t in (earlier, _hour_of_latest(lake, topic))
        }
        assert_ranges_tile(lake, topic, last_offsets(produced, topic))


def _hour_of_latest(lake: Path, topic: str) -> datetime:
    latest = max(Path(f.path) for files in scan_topic(lake, topic).files.values() for f in files)
    times: list[datetime] = pq.read_table(latest, columns=["event_time"]).column(0).to_pylist()
    return max(times)


def test_malformed_records_go_to_the_dlq_with_their_cause_and_good_ones_to_the_lake(
    stack: Settings, codec: AvroCodec, make_topics: MakeTopics, tmp_path: Path, unique: str
) -> None:
    suggestions, outcomes, dlq = make_topics("suggestions", "outcomes", "dlq")
    marker = f"PRIVATE_CODE_{uuid.uuid4().hex}"
    malformed = _malformed(codec, marker)
    bad = {suggestions: malformed["suggestions"], outcomes: malformed["outcomes"]}
    items: list[tuple[str, bytes | None, bytes | None]] = []
    expected_bad: list[tuple[str, int]] = []  # (topic, index in items) of each bad record
    good_ids: dict[str, set[str]] = {suggestions: set(), outcomes: set()}
    for i in range(2000):
        session = f"s-{i % 37}".encode()
        first, second = one_of_each(f"s-{i % 37}")[:2]
        for topic, event, schema_topic in (
            (suggestions, first, "telemetry.suggestions"), (outcomes, second, "telemetry.outcomes"),
        ):  # fmt: skip
            items.append((topic, session, codec.encode(schema_topic, event.to_record())))
            good_ids[topic].add(event.event_id)
        if i % 100 == 50:  # 1% malformed, cycling through every kind
            for topic in (suggestions, outcomes):
                cause, value = bad[topic][(i // 100) % len(bad[topic])]
                expected_bad.append((cause, len(items)))
                items.append((topic, session, value))
    for topic in (suggestions, outcomes):  # then every kind once more, so each one is seen
        for cause, value in bad[topic]:
            expected_bad.append((cause, len(items)))
            items.append((topic, b"s-0", value))
    produced = produce(stack, items)
    wanted = {}
    for cause, index in expected_bad:
        p = produced[index]
        wanted[(p.topic, p.partition, p.offset)] = (cause, p)

    lake = tmp_path / "lake"
    decode_as = {suggestions: "telemetry.suggestions", outcomes: "telemetry.outcomes"}
    status = sink(stack, codec, lake, decode_as, dlq, max_record_bytes=4096).run(
        threading.Event(), until_caught_up=True
    )

    letters = read_letters(stack, dlq, len(wanted), f"{unique}.reader")
    got = {
        (h["flywheel.topic"], int(h["flywheel.partition"]), int(h["flywheel.offset"])): letter
        for letter in letters
        for h in [letter.headers]
    }
    assert len(letters) == len(got) == len(wanted)  # 100% there, once, and no good record
    assert set(got) == set(wanted)
    for coordinates, letter in got.items():
        cause, original = wanted[coordinates]
        assert letter.headers["flywheel.cause"] == cause, (coordinates, letter.headers)
        assert letter.headers["flywheel.stage"] == "sink"
        assert letter.key == original.key
        assert marker not in repr(letter), "privacy-mode code text reached the DLQ"
        if original.topic == outcomes and cause != "oversized":
            assert letter.value == original.value  # original bytes, ready to replay
        if original.topic == suggestions and cause != "invalid_value":
            assert letter.value == b"" and letter.headers["flywheel.body-withheld"] in (
                "privacy", "oversized",
            )  # fmt: skip
    assert Counter(c for c, _ in wanted.values()) == status.dead_letters
    assert set(status.dead_letters) == {
        "bad_magic", "truncated", "unknown_schema", "schema_mismatch", "invalid_body",
        "oversized", "invalid_value",
    }  # fmt: skip
    for topic, ids in good_ids.items():
        rows = lake_rows(lake, topic)
        assert sorted(str(r[0]) for r in rows) == sorted(ids)
        assert_ranges_tile(lake, topic, last_offsets(produced, topic))  # dead letters covered


def _malformed(codec: AvroCodec, marker: str) -> dict[str, list[tuple[str, bytes]]]:
    """Per test topic: (expected cause, bytes) of every kind of bad record."""
    suggestion = codec.encode("telemetry.suggestions", offered().to_record())
    outcome = codec.encode("telemetry.outcomes", one_of_each()[1].to_record())
    ack = ReplicaAck(producer=PRODUCER, replica_id="r", model_name="m", version=1,
                     state=ReplicaState.READY)  # fmt: skip
    foreign = codec.encode("models.acks", ack.to_record())  # a schema the topic cannot read
    unknown_id = HEADER.pack(0, 2**31 - 7)
    private_code = f"def f():\n    return '{marker}'\n"

    def encode(event: Event) -> bytes:
        return codec.encode("telemetry.suggestions", event.to_record())

    def common(good: bytes) -> list[tuple[str, bytes]]:
        return [
            ("bad_magic", b"\x07" + good[1:]),
            ("truncated", good[:3]),
            ("truncated", good[: len(good) - 9]),
            ("unknown_schema", unknown_id + good[5:]),
            ("schema_mismatch", foreign),
            ("invalid_body", good + b"\x02\x04"),
            ("oversized", good[:5] + b"\x00" * 5000),
        ]

    return {
        "suggestions": [
            *common(suggestion),
            ("invalid_body", _bad_uuid(codec, offered())),
            ("invalid_value", encode(offered(propensity=1.5))),
            ("invalid_value", encode(offered(privacy_mode=True, suggestion_text=private_code))),
            ("oversized", encode(offered(suggestion_text=marker * 200))),
        ],
        "outcomes": common(outcome),
    }  # fmt: skip


def _bad_uuid(codec: AvroCodec, event: Event) -> bytes:
    record = event.to_record() | {"event_id": "not-a-uuid"}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema("SuggestionOffered"), record)
    return codec.encode("telemetry.suggestions", event.to_record())[:5] + out.getvalue()


def test_a_range_of_dead_letters_only_becomes_a_zero_row_file(
    stack: Settings, codec: AvroCodec, make_topics: MakeTopics, tmp_path: Path
) -> None:
    topic, dlq = make_topics("outcomes", "dlq")
    good = [codec.encode("telemetry.outcomes", one_of_each()[1].to_record()) for _ in range(3)]
    produced = produce(stack, [(topic, b"s-1", v) for v in [*good, b"\x07bad", b"\x00\x00"]])
    lake = tmp_path / "lake"
    status = sink(
        stack, codec, lake, {topic: "telemetry.outcomes"}, dlq, limits=RotationLimits(max_rows=3)
    ).run(threading.Event(), until_caught_up=True)
    assert (status.rows, status.files, sum(status.dead_letters.values())) == (3, 2, 2)
    partition = produced[0].partition
    files = scan_topic(lake, topic).files[partition]
    assert [(f.first, f.last) for f in files] == [(0, 2), (3, 4)]
    assert pq.read_metadata(files[1].path).num_rows == 0
    assert len(lake_rows(lake, topic)) == 3
