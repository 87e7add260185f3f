"""Decoded records into a lake table (LakeColumns): every event type round-trips, and an empty
table has the schema."""

from __future__ import annotations

import io
import uuid
from array import array
from datetime import UTC, datetime
from typing import Any, cast

import fastavro
import pytest

from processors.lake.columns import LakeColumns
from schemas.catalog import load_schema, parsed_schema
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


def test_an_empty_table_has_the_schema() -> None:
    columns = LakeColumns(load_schema("SuggestionOffered"))
    table = columns.table([], "t", 0, array("q"))
    assert table.num_rows == 0
    assert table.schema == columns.schema
