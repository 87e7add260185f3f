"""The compiled Avro writers write fastavro's bytes, and leave every other record to it."""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from schemas.catalog import parsed_schema, schema_names
from schemas.events import SuggestionOffered
from streams.avro_compiled import (
    Unsupported,
    compile_reader,
    compile_writer,
    read_long,
    write_long,
)
from streams.errors import DecodeError, EventValidationError
from streams.serde import HEADER, AvroCodec, _without_logical_types
from streams.topics import TOPIC_VALUE_SCHEMAS
from tests.registry_double import FakeRegistry
from tests.sample_events import offered

# Values at the edges of the encodings: one-byte varints end at 63, longs at 2**63.
LONGS = [0, 1, -1, 63, 64, -64, -65, 127, 128, 8191, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
INTS = [v for v in LONGS if -(2**31) <= v < 2**31]
STRINGS = ["", "a", "é" * 40, "x" * 63, "y" * 64, "z" * 5000, "日本語 ✓"]


def fastavro_bytes(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    return out.getvalue()


def sample(schema: Any, named: dict[str, Any], rng: random.Random) -> Any:
    """A random plain value of `schema` (what `AvroRecord.to_record` makes)."""
    if isinstance(schema, list):
        other = next(t for t in schema if t != "null")
        return None if rng.random() < 0.3 else sample(other, named, rng)
    if isinstance(schema, str):
        if schema in named:
            return sample(named[schema], named, rng)
        makers: dict[str, Callable[[], Any]] = {
            "int": lambda: rng.choice([*INTS, rng.randint(-(2**31), 2**31 - 1)]),
            "long": lambda: rng.choice([*LONGS, rng.randint(-(2**63), 2**63 - 1)]),
            "string": lambda: rng.choice(STRINGS),
            "double": lambda: rng.choice([0.0, -1.5, 1e300, rng.random()]),
            "float": lambda: rng.choice([0.0, 0.25, -3.5]),
            "boolean": lambda: rng.random() < 0.5,
            "bytes": lambda: rng.randbytes(rng.choice([0, 5, 70])),
        }
        return makers[schema]()
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: sample(f["type"], named, rng) for f in schema["fields"]}
    if kind == "enum":
        named[schema["name"]] = schema
        return rng.choice(schema["symbols"])
    if kind == "array":
        return [sample(schema["items"], named, rng) for _ in range(rng.choice([0, 1, 3, 70]))]
    if kind == "map":
        n = rng.choice([0, 1, 4])
        return {f"k{i}": sample(schema["values"], named, rng) for i in range(n)}
    return sample(kind, named, rng)


def fastavro_plain_read(schema: Any, body: bytes) -> Any:
    return fastavro.schemaless_reader(
        io.BytesIO(body), fastavro.parse_schema(_without_logical_types(schema)), None
    )


@pytest.mark.parametrize("name", schema_names())
def test_compiled_code_writes_and_reads_as_fastavro_on_every_schema(name: str) -> None:
    schema = parsed_schema(name)
    write, read = compile_writer(schema), compile_reader(schema)
    rng = random.Random(name)
    for _ in range(300):
        record = sample(schema, {}, rng)
        body = fastavro_bytes(schema, record)
        assert write(record) == body
        assert read(b"head" + body, 4) == (fastavro_plain_read(schema, body), len(body) + 4)


def test_readers_raise_on_bodies_fastavro_must_judge() -> None:
    schema = parsed_schema("SuggestionOffered")
    read = compile_reader(schema)
    body = fastavro_bytes(schema, offered().to_record())
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises((IndexError, EOFError, ValueError, struct.error)):
            read(body[:cut], 0)
    with pytest.raises(ValueError, match="varint"):
        read(b"\xff" * 11, 0)


def test_blocks_with_negative_counts_are_read() -> None:
    """Other writers (Java's, with a block size) write a negative count and the block's bytes."""
    schema = {"type": "record", "name": "A", "fields": [
        {"name": "xs", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
    ]}  # fmt: skip
    # xs: count -2 (zig-zag 3), block size 2 (4), items 1 (2) and 2 (4), end; m: count -1,
    # size 4, "k" -> "v", end.
    body = bytes([3, 4, 2, 4, 0, 1, 8, 2, ord("k"), 2, ord("v"), 0])
    expected = {"xs": [1, 2], "m": {"k": "v"}}
    assert fastavro_plain_read(schema, body) == expected
    assert compile_reader(schema)(body, 0) == (expected, len(body))


@pytest.mark.parametrize("n", LONGS)
def test_longs_are_zigzag_varints(n: int) -> None:
    out = bytearray()
    write_long(out, n)
    assert bytes(out) == fastavro_bytes("long", n)


def test_values_it_does_not_take_raise_instead_of_writing() -> None:
    write = compile_writer(parsed_schema("SuggestionOffered"))
    record = offered().to_record()
    for field, value in [
        ("event_time", datetime(2026, 1, 1, tzinfo=UTC)),  # fastavro converts it
        ("event_time", 2**63),
        ("model_version", "3"),
        ("producer", b"bytes"),
    ]:
        with pytest.raises((TypeError, OverflowError, AttributeError)):
            write({**record, field: value})
    with pytest.raises(KeyError):  # fastavro applies the field's default
        write({k: v for k, v in record.items() if k != "producer"})


def writes_as_fastavro_or_raises(field_type: Any, value: Any) -> bool:
    """The compiled writer never writes what fastavro would not: it raises (and the codec
    falls back to fastavro) or writes fastavro's bytes."""
    schema = fastavro.parse_schema(
        {"type": "record", "name": "R", "fields": [{"name": "f", "type": field_type}]}
    )
    try:
        written = compile_writer(schema)({"f": value})
    except Exception:  # any refusal is fine: fastavro decides
        return True
    try:
        return written == fastavro_bytes(schema, {"f": value})
    except Exception:  # fastavro refuses what the compiled writer wrote
        return False


@pytest.mark.parametrize(
    ("field_type", "value"),
    [
        (["null", "int"], 2**31),  # fastavro checks a union's int against 32 bits
        (["null", "int"], -(2**31) - 1),
        (["null", "long"], True),  # a bool is no union's long, double or float
        (["null", "double"], True),
        (["null", "float"], False),
        (["null", {"type": "array", "items": "float"}], [0.5, True]),
        (["null", {"type": "array", "items": "long"}], (1, 2)),  # a tuple names a branch
        (["null", {"type": "array", "items": "long"}], "ab"),
        (["null", {"type": "map", "values": "long"}], []),
        (["null", "bytes"], memoryview(b"ab")),
        (["null", "double"], Decimal("1.5")),
        ({"type": "array", "items": "long"}, None),  # not an empty array
        ({"type": "map", "values": "long"}, 0),
    ],
)
def test_values_fastavro_refuses_are_not_written(field_type: Any, value: Any) -> None:
    assert writes_as_fastavro_or_raises(field_type, value)


def test_varints_beyond_64_bits_are_refused() -> None:
    """fastavro wraps them to 64 bits; the compiled reader leaves such a body to it."""
    with pytest.raises(ValueError, match="64 bits"):
        read_long(bytes([0xFE] + [0xFF] * 8 + [0x7F]), 0)
    assert read_long(bytes([0xFE] + [0xFF] * 8 + [0x01]), 0) == (2**63 - 1, 10)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "F", "fields": [
            {"name": "f", "type": {"type": "fixed", "name": "X", "size": 2}}]},
        {"type": "record", "name": "U", "fields": [
            {"name": "u", "type": ["null", "int", "string"]}]},
        {"type": "record", "name": "D", "fields": [
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4}}]},
    ],
)  # fmt: skip
def test_schemas_beyond_the_platforms_types_are_left_to_fastavro(schema: dict[str, Any]) -> None:
    with pytest.raises(Unsupported):
        compile_writer(schema)
    with pytest.raises(Unsupported):
        compile_reader(schema)


def codec() -> AvroCodec:
    return AvroCodec(FakeRegistry())  # type: ignore[arg-type]  # a fake registry


def test_the_codec_hands_records_the_writer_refuses_to_fastavro() -> None:
    event = offered()
    topic = next(t for t, s in TOPIC_VALUE_SCHEMAS.items() if s == "SuggestionOffered")
    plain = event.to_record()
    converted = {**plain, "event_time": event.event_time}  # a datetime: fastavro converts it
    c = codec()
    assert c.encode(topic, converted) == c.encode(topic, plain)
    assert c.encode(topic, plain)[HEADER.size :] == fastavro_bytes(
        parsed_schema("SuggestionOffered"), plain
    )
    assert SuggestionOffered.from_record(c.decode(topic, c.encode(topic, converted))) == event
    with pytest.raises(EventValidationError, match="model_version"):
        c.encode(topic, {**plain, "model_version": "three"})


def test_the_codec_hands_bodies_the_reader_refuses_to_fastavro() -> None:
    """A refused body gets fastavro's error (the cause a dead letter carries)."""
    c = codec()
    topic = next(t for t, s in TOPIC_VALUE_SCHEMAS.items() if s == "SuggestionOffered")
    data = c.encode(topic, offered().to_record())
    assert c.decode(topic, data, plain=True) == fastavro_plain_read(
        parsed_schema("SuggestionOffered"), data[HEADER.size :]
    )
    with pytest.raises(DecodeError) as truncated:
        c.decode(topic, data[:-3], plain=True)
    assert truncated.value.cause == "truncated"
    with pytest.raises(DecodeError) as trailing:
        c.decode(topic, data + b"\x00", plain=True)
    assert trailing.value.cause == "invalid_body"
