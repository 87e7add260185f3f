"""Avro -> Arrow: every construct the schemas use, all ten schemas."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from contracts.arrow_schema import ENUM_SYMBOLS_KEY, KAFKA_COLUMNS, arrow_schema, field_type
from contracts.errors import UnsupportedSchemaError
from schemas.catalog import load_schema, schema_names
from streams.topics import TOPIC_VALUE_SCHEMAS


def record(fields: list[dict[str, Any]], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": fields}


@pytest.mark.parametrize(
    ("avro", "arrow"),
    [
        ("string", pa.string()),
        ({"type": "string", "logicalType": "uuid"}, pa.string()),
        ("int", pa.int32()),
        ("long", pa.int64()),
        ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", tz="UTC")),
        ("float", pa.float32()),
        ("double", pa.float64()),
        ("boolean", pa.bool_()),
        ("bytes", pa.binary()),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, pa.string()),
        ({"type": "array", "items": "float"}, pa.list_(pa.field("item", pa.float32(), False))),
        (
            {"type": "map", "values": "double"},
            pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.float64(), False)),
        ),
        (
            record([{"name": "x", "type": "int"}, {"name": "y", "type": ["null", "string"]}]),
            pa.struct([pa.field("x", pa.int32(), False), pa.field("y", pa.string(), True)]),
        ),
    ],
)
def test_each_avro_type_maps_to_its_arrow_type(avro: Any, arrow: pa.DataType) -> None:
    field = field_type(avro)
    assert field.type == arrow
    assert field.nullable is False


@pytest.mark.parametrize("union", [["null", "long"], ["long", "null"]])
def test_a_nullable_union_is_a_nullable_column(union: list[str]) -> None:
    field = field_type(union)
    assert (field.type, field.nullable) == (pa.int64(), True)


def test_a_union_of_two_types_is_refused_with_the_field_name() -> None:
    with pytest.raises(UnsupportedSchemaError, match=r"'v'.*only"):
        arrow_schema(record([{"name": "v", "type": ["null", "int", "string"]}]))


def test_named_types_resolve_by_reference_and_recursion_is_refused() -> None:
    point = record([{"name": "x", "type": "int"}], name="Point")
    schema = arrow_schema(
        record(
            [
                {"name": "a", "type": point},
                {"name": "b", "type": "t.Point"},
                {"name": "c", "type": "Point"},
            ]
        )
    )
    assert schema.field("a").type == schema.field("b").type == schema.field("c").type
    with pytest.raises(UnsupportedSchemaError, match="recursive"):
        arrow_schema(record([{"name": "next", "type": ["null", "Node"]}], name="Node"))


def test_the_kafka_columns_are_reserved() -> None:
    with pytest.raises(UnsupportedSchemaError, match="_offset"):
        arrow_schema(record([{"name": "_offset", "type": "long"}]))


@pytest.mark.parametrize("name", schema_names())
def test_every_platform_schema_converts_with_the_kafka_columns_last(name: str) -> None:
    avro = load_schema(name)
    schema = arrow_schema(avro)
    assert schema.names == [f["name"] for f in avro["fields"]] + [f.name for f in KAFKA_COLUMNS]
    assert schema.field("event_time").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("event_id").type == pa.string()
    for field in avro["fields"]:
        nullable = isinstance(field["type"], list) and "null" in field["type"]
        assert schema.field(field["name"]).nullable is nullable, field["name"]


def test_enums_are_strings_that_keep_their_symbols() -> None:
    field = arrow_schema(load_schema("SuggestionOffered")).field("decision")
    assert field.type == pa.string()
    assert field.metadata[ENUM_SYMBOLS_KEY] == b'["SHOWN", "SUPPRESSED"]'


def test_every_topic_has_a_lake_schema() -> None:
    for topic, name in TOPIC_VALUE_SCHEMAS.items():
        assert (
            arrow_schema(load_schema(name)).metadata[b"flywheel.avro.schema"]
            == f"flywheel.v1.{name}".encode()
        ), topic
