"""The codec against the real registry: registration, round trips, foreign clients, bad bytes."""

from __future__ import annotations

import dataclasses
import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flywheel.settings import Settings
from schemas.catalog import schema_text, subject_for
from schemas.events import EVENT_TYPES
from streams.errors import DecodeError, EventValidationError, SchemaRegistryRequestError
from streams.serde import COMPATIBILITY, AvroCodec
from streams.topics import TOPIC_VALUE_SCHEMAS
from tests.sample_events import offered, one_of_each

pytestmark = pytest.mark.integration
TOPIC_OF = {schema: topic for topic, schema in TOPIC_VALUE_SCHEMAS.items()}


@pytest.fixture
def codec(stack: Settings) -> AvroCodec:
    return AvroCodec.for_url(stack.registry_url)


def test_every_subject_is_registered_backward_transitive(stack: Settings, codec: AvroCodec) -> None:
    ids = codec.register_all()
    registry = SchemaRegistryClient({"url": stack.registry_url})
    for topic, schema_id in ids.items():
        assert registry.get_compatibility(subject_for(topic)) == COMPATIBILITY
        current = Schema(schema_text(TOPIC_VALUE_SCHEMAS[topic]), "AVRO")
        assert registry.lookup_schema(subject_for(topic), current).schema_id == schema_id
    assert AvroCodec.for_url(stack.registry_url).register_all() == ids  # idempotent


def test_events_round_trip_through_the_codec(codec: AvroCodec) -> None:
    for event in one_of_each():
        topic = TOPIC_OF[event.SCHEMA_NAME]
        back = type(event).from_record(codec.decode(topic, codec.encode_event(topic, event)))
        assert back == event


def test_plain_decoding_keeps_logical_types_as_avro_values_and_builds_the_same_events(
    codec: AvroCodec,
) -> None:
    for event in one_of_each():
        topic = TOPIC_OF[event.SCHEMA_NAME]
        record = codec.decode(topic, codec.encode_event(topic, event), plain=True)
        assert isinstance(record["event_time"], int)
        assert isinstance(record["event_id"], str)
        assert type(event).from_record(record) == event


def test_stock_confluent_serdes_interoperate_both_ways(stack: Settings, codec: AvroCodec) -> None:
    registry = SchemaRegistryClient({"url": stack.registry_url})
    topic = "telemetry.suggestions"
    ctx = SerializationContext(topic, MessageField.VALUE)
    event = offered()
    ours = codec.encode_event(topic, event)
    assert AvroDeserializer(registry)(ours, ctx)["suggestion_id"] == event.suggestion_id
    # A foreign producer with the registered schema and its own serializer.
    foreign = AvroSerializer(registry, schema_text("SuggestionOffered"))(event.to_record(), ctx)
    assert foreign is not None
    assert EVENT_TYPES["SuggestionOffered"].from_record(codec.decode(topic, foreign)) == event


def test_invalid_events_name_the_field(codec: AvroCodec) -> None:
    bad = dataclasses.replace(offered(), propensity="high")  # type: ignore[arg-type]
    with pytest.raises(EventValidationError, match="propensity"):
        codec.encode_event("telemetry.suggestions", bad)


def test_bytes_that_do_not_decode_get_a_cause(stack: Settings, codec: AvroCodec) -> None:
    topic = "telemetry.suggestions"
    good = codec.encode_event(topic, offered())
    cases = [
        ("bad_magic", b"\x07" + good[1:]),
        ("truncated", good[:3]),  # not even a header
        ("truncated", good[: len(good) // 2]),  # the body ends early
        ("unknown_schema", good[:1] + (2**31 - 7).to_bytes(4, "big") + good[5:]),
        ("invalid_body", good + b"\x00\x01"),  # trailing bytes
    ]
    for cause, data in cases:
        with pytest.raises(DecodeError) as refused:
            codec.decode(topic, data)
        assert refused.value.cause == cause, (cause, str(refused.value))
    # Another topic's record: its schema cannot be read as a SuggestionOffered.
    outcome = one_of_each()[1]
    other = codec.encode_event("telemetry.outcomes", outcome)
    with pytest.raises(DecodeError) as refused:
        codec.decode(topic, other)
    assert refused.value.cause == "schema_mismatch"


def test_an_incompatible_producer_is_refused_with_a_clear_error(
    stack: Settings, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The codec registers under its own subject here, so the real subjects stay untouched.
    monkeypatch.setattr("streams.serde.subject_for", lambda topic: f"{unique}-value")
    AvroCodec.for_url(stack.registry_url).register("models.acks")
    changed = json.loads(schema_text("ReplicaAck"))
    changed["fields"].append({"name": "required_new", "type": "string", "doc": "no default"})
    monkeypatch.setattr("streams.serde.schema_text", lambda name: json.dumps(changed))
    with pytest.raises(
        SchemaRegistryRequestError, match=r"not BACKWARD_TRANSITIVE-compatible.*defaults"
    ):
        AvroCodec.for_url(stack.registry_url).register("models.acks")
