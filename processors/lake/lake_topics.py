"""What the sink needs per topic: its schema, decoder, columns and privacy class."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contracts.dead_letters import CODE_TEXT_FIELD
from processors.lake.columns import LakeColumns
from processors.lake.decoding import RecordDecoder
from processors.lake.errors import SinkConfigError
from processors.lake.validation import RecordValidator
from schemas.catalog import load_schema
from streams.serde import Decoder
from streams.topics import TOPIC_VALUE_SCHEMAS

EVENT_TIME_FIELD = "event_time"  # every event has it (DESIGN §4); it places rows in the lake


@dataclass(frozen=True)
class LakeTopic:
    """One consumed topic: `schema_topic` is the contract topic whose value schema it carries."""

    name: str
    schema_topic: str
    columns: LakeColumns
    decoder: RecordDecoder
    carries_code_text: bool


def lake_topics(
    topics: Iterable[str],
    codec: Decoder,
    *,
    decode_as: Mapping[str, str] | None = None,
    max_record_bytes: int,
) -> dict[str, LakeTopic]:
    """A LakeTopic per topic. `decode_as` maps a topic that is not one of the platform's (a test
    copy, a mirror) to the platform topic whose schema it carries.

    Raises SinkConfigError naming the fix for a topic with no known schema.
    """
    decode_as = decode_as or {}
    out: dict[str, LakeTopic] = {}
    for name in topics:
        schema_topic = decode_as.get(name, name)
        schema_name = TOPIC_VALUE_SCHEMAS.get(schema_topic)
        if schema_name is None:
            raise SinkConfigError(
                f"topic {name!r} carries no platform event; sink one of "
                f"{', '.join(TOPIC_VALUE_SCHEMAS)}, or map it to one with "
                f"--topic {name}=<platform topic>"
            )
        avro = load_schema(schema_name)
        field_names = tuple(f["name"] for f in avro["fields"])
        if EVENT_TIME_FIELD not in field_names:
            raise SinkConfigError(f"{schema_name} has no {EVENT_TIME_FIELD} field to place rows by")
        decoder = RecordDecoder(codec, schema_topic, RecordValidator(field_names), max_record_bytes)
        out[name] = LakeTopic(
            name, schema_topic, LakeColumns(avro), decoder, CODE_TEXT_FIELD in field_names
        )
    if not out:
        raise SinkConfigError("no topics to sink; pass at least one with --topic")
    return out
