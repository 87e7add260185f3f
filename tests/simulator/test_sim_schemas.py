"""Every simulated event is a valid record of its Avro schema and survives a round trip."""

from __future__ import annotations

import io
from collections import Counter
from typing import Any, cast

import fastavro
from fastavro.validation import validate

from schemas.catalog import parsed_schema
from schemas.events import EVENT_TYPES, Event
from simulator import Fleet

FleetRun = tuple[Fleet, list[Event]]  # the shared default_run fixture (conftest.py)


def test_every_event_validates_against_its_schema(default_run: FleetRun) -> None:
    events = default_run[1]
    kinds = Counter(e.SCHEMA_NAME for e in events)
    assert set(kinds) == {
        "SuggestionOffered",
        "SuggestionOutcome",
        "EditObserved",
        "TestRunCompleted",
        "RolloutResult",
    }
    for event in events:
        validate(event.to_record(), parsed_schema(event.SCHEMA_NAME), raise_errors=True)


def test_events_round_trip_through_avro(default_run: FleetRun) -> None:
    seen: set[str] = set()
    for event in default_run[1]:
        if event.SCHEMA_NAME in seen:
            continue
        seen.add(event.SCHEMA_NAME)
        schema = parsed_schema(event.SCHEMA_NAME)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, event.to_record())
        buffer.seek(0)
        record = cast(dict[str, Any], fastavro.schemaless_reader(buffer, schema, schema))
        decoded = EVENT_TYPES[event.SCHEMA_NAME].from_record(record)
        # float32 arrays (context, behaviour_logprobs) already hold float32 values: exact.
        assert decoded == event
    assert len(seen) == 5
