"""Avro -> Arrow: every construct the schemas use, all ten schemas, and records into a table."""

from __future__ import annotations

import io
import uuid
from array import array
from datetime import UTC, datetime
from typing import Any, cast

import fastavro
import pyarrow as pa
import pytest

from processors.lake.arrow_schema import ENUM_SYMBOLS_KEY, KAFKA_COLUMNS, arrow_schema, field_type
from processors.lake.columns import LakeColumns
from processors.lake.errors import UnsupportedSchemaError
from schemas.catalog import TOPIC_VALUE_SCHEMAS, load_schema, parsed_schema, schema_names
from schemas.enums import Channel, ModelEventType, ReplicaState, RewardSource
from schemas.events import (
    ChannelPointer,
    Event,
    FeatureUpdate,
    LakeOffsetRange,
    ModelVersionEvent,
    ReplicaAck,
    Reward,
    TrainingWindow,
)
from tests.sample_events import PRODUCER, one_of_each


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


def model_events() -> list[Event]:
    window = TrainingWindow(
        mds_dataset="gate", mds_windows=("w-1", "w-2"),
        lake_ranges=(LakeOffsetRange(topic="rewards", partition=1, first=0, last=99),),
    )  # fmt: skip
    return [
        ModelVersionEvent(
            producer=PRODUCER, model_name="gate", version=2, parent_version=1,
            event_type=ModelEventType.GATE_PASSED, artifact_uri="file:///m/2",
            artifact_sha256="ab" * 32, training_window=window, reward_fn="tab@1",
            metrics={"loss": 0.5}, ope_dr_lower=0.1,
        ),
        ChannelPointer(
            producer=PRODUCER, model_name="gate", channel=Channel.CANARY, version=2,
            traffic_fraction=0.1, artifact_uri="file:///m/2", artifact_sha256="ab" * 32,
        ),
        ReplicaAck(
            producer=PRODUCER, replica_id="r-1", model_name="gate", version=2,
            state=ReplicaState.READY,
        ),
        Reward(
            producer=PRODUCER, reward_id="rw-1", source=RewardSource.ROLLOUT, source_id="ro-1",
            group_id="g-1", model_name="agent", model_version=3, reward=0.75,
            reward_components={"tests": 0.75}, reward_fn="tab@1", advantage=0.2,
            attributed_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        ),
        FeatureUpdate(
            producer=PRODUCER, entity_type="user", entity_id="u-1", feature_name="accepts",
            window="1h", value=None, as_of=datetime(2026, 1, 2, tzinfo=UTC), source_event_count=4,
        ),
    ]  # fmt: skip


@pytest.mark.parametrize("event", one_of_each() + model_events(), ids=lambda e: e.SCHEMA_NAME)
def test_decoded_records_round_trip_into_a_lake_table(event: Event) -> None:
    avro = parsed_schema(event.SCHEMA_NAME)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, avro, event.to_record())
    decoded = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(out.getvalue()), avro))
    assert isinstance(decoded["event_id"], uuid.UUID)  # what the converters exist for
    columns = LakeColumns(load_schema(event.SCHEMA_NAME))
    table = columns.table([columns.row(decoded)] * 2, "t.x", 3, array("q", [7, 8]))
    assert table.schema == columns.schema
    rows = table.to_pylist()
    assert [(r["_topic"], r["_partition"], r["_offset"]) for r in rows] == [
        ("t.x", 3, 7),
        ("t.x", 3, 8),
    ]
    back = {k: v for k, v in rows[0].items() if not k.startswith("_")}
    # The sample values are exact in float32, so equality holds after the float32 columns too.
    assert _plain(back) == _plain(event.to_record())


def _plain(value: Any) -> Any:
    """One form for both sides: times as epoch ms, sequences as lists, Arrow maps as dicts."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _plain(v) for k, v in value}  # pyarrow returns a map as (key, value) pairs
        return [_plain(v) for v in value]
    return value


def test_every_topic_has_a_lake_schema() -> None:
    for topic, name in TOPIC_VALUE_SCHEMAS.items():
        assert (
            arrow_schema(load_schema(name)).metadata[b"flywheel.avro.schema"]
            == f"flywheel.v1.{name}".encode()
        ), topic


def test_an_empty_table_has_the_schema() -> None:
    columns = LakeColumns(load_schema("SuggestionOffered"))
    table = columns.table([], "t", 0, array("q"))
    assert table.num_rows == 0
    assert table.schema == columns.schema
