"""Avro in the Confluent wire format for the platform's topics, through a schema registry.

Wire format: magic byte 0, the schema id as a 4-byte big-endian int, then the Avro binary body.
Schemas are registered once per topic (subject `<topic>-value`, BACKWARD_TRANSITIVE) and ids are
cached, so encoding and decoding make no per-message registry call. Each schema is parsed once.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping
from typing import Any, Protocol

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from fastavro.validation import ValidationError, validate

from schemas.catalog import parsed_schema, schema_text, subject_for
from schemas.events import Event
from streams.avro_compiled import Reader, Unsupported, Writer, compile_reader, compile_writer
from streams.errors import DecodeError, EventValidationError, SchemaRegistryRequestError
from streams.topics import TOPIC_VALUE_SCHEMAS

MAGIC_BYTE = 0
HEADER = struct.Struct(">bI")  # magic byte, schema id
COMPATIBILITY = "BACKWARD_TRANSITIVE"


def schema_id_of(data: bytes) -> int:
    """The schema id in a wire-format message's header; DecodeError if there is none."""
    if len(data) < HEADER.size:
        raise DecodeError("truncated", f"{len(data)} bytes is shorter than the 5-byte header")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise DecodeError("bad_magic", f"magic byte is {magic}, not {MAGIC_BYTE}")
    return int(schema_id)


class Decoder(Protocol):
    """What decodes a topic's wire-format bytes into a record (:class:`AvroCodec` does; the lake
    sink needs no more). DecodeError names the cause of a failure."""

    def decode(self, topic: str, data: bytes) -> dict[str, Any]: ...


class Codec(Decoder, Protocol):
    """Wire-format Avro both ways for the platform's topics (:class:`AvroCodec`)."""

    def encode(self, topic: str, record: Mapping[str, Any]) -> bytes: ...


class AvroCodec:
    """Encodes and decodes the platform's events for their topics.

    The reader schema is always the platform's current one; records written with an older
    (compatible) schema are resolved to it, and the writer schema is fetched once per id.
    """

    def __init__(self, registry: SchemaRegistryClient) -> None:
        self._registry = registry
        self._ids: dict[str, int] = {}  # topic -> id of the current schema
        self._writers: dict[int, Any] = {}  # schema id -> parsed writer schema
        # topic -> (wire header, schema, its compiled writer or None)
        self._encoders: dict[str, tuple[bytes, Any, Writer | None]] = {}
        self._plains: dict[int, Any] = {}  # schema id -> the schema without logical types
        self._readers: dict[int, Reader | None] = {}  # schema id -> its compiled plain reader

    @classmethod
    def for_url(cls, registry_url: str, config: Mapping[str, str] | None = None) -> AvroCodec:
        return cls(SchemaRegistryClient({"url": registry_url, **(config or {})}))

    def register(self, topic: str) -> int:
        """Register the topic's current value schema (idempotent); returns its id."""
        if topic in self._ids:
            return self._ids[topic]
        name = _schema_name(topic)
        subject = subject_for(topic)
        try:
            self._registry.set_compatibility(subject, COMPATIBILITY)
            schema_id = int(
                self._registry.register_schema(subject, Schema(schema_text(name), "AVRO"))
            )
        except SchemaRegistryError as exc:
            if exc.http_status_code == 409:
                raise SchemaRegistryRequestError(
                    f"the registry refused {name} for subject {subject}: it is not "
                    f"{COMPATIBILITY}-compatible with the versions registered there. Evolve "
                    "the schema compatibly (new fields need defaults) or use a new subject."
                ) from exc
            raise SchemaRegistryRequestError(
                f"registering {name} under {subject} failed: {exc}"
            ) from exc
        except Exception as exc:  # transport errors surface as requests/httpx exceptions
            raise SchemaRegistryRequestError(
                f"cannot reach the schema registry to register {subject}: {exc}; "
                "check FLYWHEEL_SCHEMA_REGISTRY_URL or run `flywheel stack up`"
            ) from exc
        self._ids[topic] = schema_id
        self._writers[schema_id] = parsed_schema(name)
        return schema_id

    def register_all(self) -> dict[str, int]:
        """Register every topic's value schema; returns topic -> schema id."""
        return {topic: self.register(topic) for topic in TOPIC_VALUE_SCHEMAS}

    def encode(self, topic: str, record: Mapping[str, Any]) -> bytes:
        """Wire-format bytes of `record` for `topic`.

        Raises EventValidationError naming each field that does not match the schema. The
        schema's compiled writer (`streams.avro_compiled`) takes plain records; any other goes
        to fastavro, which converts it (datetimes, defaults) and checks types as it writes;
        only a record it refuses pays for the full validation that names the fields
        (validating every record up front costs more than encoding it).
        """
        writer = self._encoders.get(topic)
        if writer is None:
            schema_id = self.register(topic)
            schema = self._writers[schema_id]
            try:
                compiled: Writer | None = compile_writer(schema)
            except Unsupported:
                compiled = None
            writer = self._encoders[topic] = (HEADER.pack(MAGIC_BYTE, schema_id), schema, compiled)
        header, schema, compiled = writer
        if compiled is not None:
            try:
                return header + compiled(record)
            except Exception:  # noqa: S110 - fastavro converts it, or says what is wrong
                pass
        out = io.BytesIO(header)
        out.seek(HEADER.size)
        try:
            fastavro.schemaless_writer(out, schema, record)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            try:
                validate(record, schema, raise_errors=True)
            except ValidationError as invalid:
                raise EventValidationError(
                    f"invalid {_schema_name(topic)}: " + "; ".join(str(e) for e in invalid.errors)
                ) from None
            raise EventValidationError(f"invalid {_schema_name(topic)}: {exc}") from None
        return out.getvalue()

    def encode_event(self, topic: str, event: Event) -> bytes:
        return self.encode(topic, event.to_record())

    def decode(self, topic: str, data: bytes, *, plain: bool = False) -> dict[str, Any]:
        """The record in `data`, read with the topic's current schema. DecodeError otherwise.

        `plain`: logical types as their Avro values (timestamps as epoch-ms ints, uuids as
        strings), which `AvroRecord.from_record` takes as well; fastavro's conversions cost a
        third of an offer's decode, and a reader building typed events does them again. A
        plain record written with the current schema is read by its compiled reader
        (`streams.avro_compiled`; fastavro reads it again when that one raises)."""
        schema_id = schema_id_of(data)
        reader_id = self.register(topic)
        if plain and schema_id == reader_id:
            compiled = self._compiled_reader(schema_id)
            if compiled is not None:
                try:
                    fast, end = compiled(data, HEADER.size)
                except Exception:  # noqa: S110 - fastavro's reading or error stands
                    pass
                else:
                    if end == len(data):
                        return fast
        writer = self._writer(schema_id)
        reader = None if schema_id == reader_id else self._writers[reader_id]
        if plain:
            writer = self._plain(schema_id, writer)
            reader = None if reader is None else self._plain(reader_id, reader)
        body = io.BytesIO(data)
        body.seek(HEADER.size)
        try:
            record = fastavro.schemaless_reader(body, writer, reader)
        except fastavro.read.SchemaResolutionError as exc:
            raise DecodeError(
                "schema_mismatch", f"schema {schema_id} cannot be read as {topic}'s: {exc}"
            ) from None
        except (EOFError, IndexError) as exc:  # fastavro read past the end of the value
            raise DecodeError(
                "truncated", f"the value ends before its schema-{schema_id} record does: {exc!r}"
            ) from None
        except Exception as exc:  # fastavro raises ValueError, UnicodeDecodeError, ... otherwise
            raise DecodeError(
                "invalid_body", f"body does not decode with schema {schema_id}: {exc!r}"
            ) from None
        if body.tell() != len(data):
            raise DecodeError(
                "invalid_body", f"{len(data) - body.tell()} trailing bytes after the record"
            )
        if not isinstance(record, dict):
            raise DecodeError("schema_mismatch", f"schema {schema_id} is not a record schema")
        return record

    def _compiled_reader(self, schema_id: int) -> Reader | None:
        """The compiled reader of a current schema (`streams.avro_compiled`); None when it
        holds a type the compiler leaves to fastavro."""
        if schema_id not in self._readers:
            try:
                self._readers[schema_id] = compile_reader(self._writers[schema_id])
            except Unsupported:
                self._readers[schema_id] = None
        return self._readers[schema_id]

    def _plain(self, schema_id: int, parsed: Any) -> Any:
        plain = self._plains.get(schema_id)
        if plain is None:
            plain = self._plains[schema_id] = fastavro.parse_schema(_without_logical_types(parsed))
        return plain

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self._writers:
            try:
                schema = self._registry.get_schema(schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    raise DecodeError("unknown_schema", f"no schema with id {schema_id}") from None
                raise SchemaRegistryRequestError(
                    f"fetching schema {schema_id} failed: {exc}"
                ) from exc
            if schema.schema_type not in (None, "AVRO") or schema.schema_str is None:
                raise DecodeError("schema_mismatch", f"schema {schema_id} is {schema.schema_type}")
            self._writers[schema_id] = fastavro.parse_schema(json.loads(schema.schema_str))
        return self._writers[schema_id]


def _schema_name(topic: str) -> str:
    try:
        return TOPIC_VALUE_SCHEMAS[topic]
    except KeyError:
        raise EventValidationError(
            f"topic {topic!r} carries no platform event; known: {sorted(TOPIC_VALUE_SCHEMAS)}"
        ) from None


def _without_logical_types(schema: Any) -> Any:
    """A copy of a (parsed) schema without logicalType annotations or fastavro's parse marks."""
    if isinstance(schema, dict):
        return {
            k: _without_logical_types(v)
            for k, v in schema.items()
            if k not in ("logicalType", "__fastavro_parsed", "__named_schemas")
        }
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    return schema
