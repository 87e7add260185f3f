"""The .avsc files themselves: valid Avro, documented, carrying the envelope, evolving safely."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastavro
import pytest

from schemas.catalog import NAMESPACE, history, load_schema, schema_names
from schemas.compatibility import check_backward_transitive
from streams.topics import TOPIC_VALUE_SCHEMAS

EXPECTED_SCHEMAS = {
    "SuggestionOffered",
    "SuggestionOutcome",
    "EditObserved",
    "TestRunCompleted",
    "RolloutResult",
    "ToolCallObserved",
    "AgentTask",
    "AgentCompletion",
    "AgentFeedback",
    "Reward",
    "FeatureUpdate",
    "ModelVersionEvent",
    "ChannelPointer",
    "ReplicaAck",
    "ErasureRecorded",
    "IndexFileUpdated",
    "ChunkEmbedded",
}

ALL = sorted(EXPECTED_SCHEMAS)


def named_types(schema: Any) -> Iterator[dict[str, Any]]:
    """Every record, enum and fixed definition inside ``schema``, outermost first."""
    if isinstance(schema, list):
        for branch in schema:
            yield from named_types(branch)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in {"record", "enum", "fixed"}:
            yield schema
        if kind == "record":
            for field in schema["fields"]:
                yield from named_types(field["type"])
        elif kind == "array":
            yield from named_types(schema["items"])
        elif kind == "map":
            yield from named_types(schema["values"])
        elif isinstance(kind, dict | list):
            yield from named_types(kind)


def test_the_catalog_holds_exactly_the_designed_schemas() -> None:
    assert set(schema_names()) == EXPECTED_SCHEMAS


@pytest.mark.parametrize("name", ALL)
def test_schema_parses_on_its_own(name: str) -> None:
    # A fresh named-schema table each time: a file that leans on another file's types fails.
    fastavro.parse_schema(load_schema(name), named_schemas={})


@pytest.mark.parametrize("name", ALL)
def test_schema_is_a_record_named_like_its_file(name: str) -> None:
    schema = load_schema(name)
    assert schema["type"] == "record"
    assert schema["name"] == name
    assert schema["namespace"] == NAMESPACE


@pytest.mark.parametrize("name", ALL)
def test_every_record_field_and_enum_has_a_doc(name: str) -> None:
    undocumented = []
    for definition in named_types(load_schema(name)):
        if not str(definition.get("doc", "")).strip():
            undocumented.append(definition["name"])
        for field in definition.get("fields", []):
            if not str(field.get("doc", "")).strip():
                undocumented.append(f"{definition['name']}.{field['name']}")
    assert undocumented == []


@pytest.mark.parametrize("name", ALL)
def test_every_event_starts_with_the_envelope(name: str) -> None:
    fields = load_schema(name)["fields"]
    assert [f["name"] for f in fields[:3]] == ["event_id", "event_time", "producer"]
    assert fields[0]["type"] == {"type": "string", "logicalType": "uuid"}
    assert fields[1]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields[2]["type"] == "string"


@pytest.mark.parametrize("name", ALL)
def test_nullable_fields_put_null_first_and_default_to_null(name: str) -> None:
    for definition in named_types(load_schema(name)):
        for field in definition.get("fields", []):
            if isinstance(field["type"], list):
                assert field["type"][0] == "null", field["name"]
                assert len(field["type"]) == 2, field["name"]
                assert "default" in field, field["name"]
                assert field["default"] is None, field["name"]


def test_every_topic_maps_to_a_known_schema_and_every_schema_has_a_topic() -> None:
    assert set(TOPIC_VALUE_SCHEMAS.values()) == EXPECTED_SCHEMAS
    assert len(TOPIC_VALUE_SCHEMAS) == len(EXPECTED_SCHEMAS)


@pytest.mark.parametrize("name", ALL)
def test_every_released_version_parses(name: str) -> None:
    versions = history(name)
    assert versions, f"schemas/avro/history/{name}/v1.avsc is missing"
    for version in versions:
        fastavro.parse_schema(version, named_schemas={})


@pytest.mark.parametrize("name", ALL)
def test_current_schema_reads_every_released_version(name: str) -> None:
    assert check_backward_transitive(load_schema(name), history(name)) == []


@pytest.mark.parametrize("name", ALL)
def test_latest_released_version_is_the_current_schema(name: str) -> None:
    # Changing a schema means releasing it: copy <Name>.avsc to history/<Name>/v<N+1>.avsc.
    assert history(name)[-1] == load_schema(name), (
        f"schemas/avro/{name}.avsc differs from its latest version in history/{name}/; "
        "copy it to the next v<N>.avsc"
    )
