"""Conversion between typed record dataclasses and the dicts fastavro writes and reads.

A record class is a frozen dataclass deriving from :class:`AvroRecord`; its field annotations
decide the conversion, once per class:

=====================  ==========================  ======================================
annotation             Avro type                   written as / read from
=====================  ==========================  ======================================
``str``                string (also logical uuid)  str / str or ``uuid.UUID``
``int``, ``float``     int or long, float/double   as is
``bool``               boolean                     as is
``datetime`` (UTC)     long timestamp-millis       int ms since epoch / int or datetime
a ``StrEnum``          enum                        its symbol / symbol
an ``AvroRecord``      record                      nested dict
``tuple[T, ...]``      array                       list
``Mapping[str, T]``    map                         dict
``T | None``           ``["null", T]``             None or T
=====================  ==========================  ======================================
"""

from __future__ import annotations

import dataclasses
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple, Self

from schemas.errors import SchemaError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)

Convert = Callable[[Any], Any]


class _FieldCodec(NamedTuple):
    name: str
    encode: Convert
    decode: Convert
    optional: bool  # has a plain default, so a record written before the field existed decodes


class AvroRecord:
    """Base of the typed records: ``to_record()`` and ``from_record()`` for fastavro."""

    __slots__ = ()

    def to_record(self) -> dict[str, Any]:
        """This record as the dict ``fastavro.schemaless_writer`` takes (a fresh dict).

        Raises :class:`SchemaError` for a naive ``datetime`` (give it ``tzinfo=UTC``).
        """
        return {
            codec.name: codec.encode(getattr(self, codec.name)) for codec in _codecs(type(self))
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """Build from a dict fastavro read (with or without logical-type conversion).

        A field missing from ``record`` takes its default when it has one (null for nullable
        fields). Raises :class:`SchemaError` when a required field is missing or a value does
        not convert (e.g. an unknown enum symbol).
        """
        values: dict[str, Any] = {}
        for codec in _codecs(cls):
            if codec.name not in record:
                if codec.optional:
                    continue
                raise SchemaError(
                    f"{cls.__name__}: the record lacks required field {codec.name!r}; decode it "
                    "with the schema it was written with, or a compatible reader schema."
                )
            try:
                values[codec.name] = codec.decode(record[codec.name])
            except (TypeError, ValueError) as exc:
                raise SchemaError(
                    f"{cls.__name__}.{codec.name}: cannot convert {record[codec.name]!r}: {exc}"
                ) from exc
        return cls(**values)


def encode_time(value: datetime) -> int:
    """Milliseconds since the Unix epoch (floored) of a timezone-aware datetime."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise SchemaError(
            f"naive datetime {value!r}: event times must be timezone-aware; "
            "use datetime.now(UTC) or .replace(tzinfo=UTC)."
        )
    return (value - _EPOCH) // _ONE_MS


def decode_time(value: int | datetime) -> datetime:
    """A UTC datetime from epoch milliseconds, or from fastavro's already-converted datetime."""
    if isinstance(value, datetime):
        return value
    return _EPOCH + value * _ONE_MS


def now_ms() -> datetime:
    """The current UTC time truncated to milliseconds, the precision events carry."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def new_event_id() -> str:
    """A random UUID (version 4) as a string, for ``event_id``."""
    return str(uuid.uuid4())


def _identity(value: Any) -> Any:
    return value


def _decode_str(value: Any) -> str:
    # fastavro reads logicalType uuid as uuid.UUID; the typed events keep ids as strings.
    return str(value) if isinstance(value, uuid.UUID) else typing.cast(str, value)


def _encode_enum(value: Any) -> str:
    return str(value)  # a StrEnum's str() is its value, the Avro symbol


# Per class, built on first use. A race between threads builds the same tuple twice: harmless.
_CODECS: dict[type, tuple[_FieldCodec, ...]] = {}


def _codecs(cls: type) -> tuple[_FieldCodec, ...]:
    codecs = _CODECS.get(cls)
    if codecs is None:
        codecs = _CODECS[cls] = _build_codecs(cls)
    return codecs


def _build_codecs(cls: type) -> tuple[_FieldCodec, ...]:
    if not dataclasses.is_dataclass(cls):
        raise SchemaError(f"{cls.__name__} must be a dataclass to convert to an Avro record.")
    hints = typing.get_type_hints(cls)
    return tuple(
        _FieldCodec(
            field.name,
            *_converters(hints[field.name], f"{cls.__name__}.{field.name}"),
            optional=field.default is not dataclasses.MISSING,
        )
        for field in dataclasses.fields(cls)
    )


def _converters(annotation: Any, where: str) -> tuple[Convert, Convert]:
    """(encode, decode) for one annotation; see the module docstring for the mapping."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        inner = [arg for arg in args if arg is not types.NoneType]
        if len(inner) != 1 or len(args) != 2:
            raise SchemaError(f"{where}: only 'T | None' unions are supported, not {annotation}")
        enc, dec = _converters(inner[0], where)
        return (lambda v: None if v is None else enc(v)), (lambda v: None if v is None else dec(v))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        enc, dec = _converters(args[0], where)
        if enc is _identity and dec is _identity:
            return list, tuple
        return (lambda v: [enc(x) for x in v]), (lambda v: tuple(dec(x) for x in v))
    if origin is Mapping and len(args) == 2 and args[0] is str:
        enc, dec = _converters(args[1], where)
        return (lambda v: {k: enc(x) for k, x in v.items()}), (
            lambda v: {k: dec(x) for k, x in v.items()}
        )
    if annotation is datetime:
        return encode_time, decode_time
    if annotation is str:
        return _identity, _decode_str
    if annotation in (int, float, bool):
        return _identity, _identity
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return _encode_enum, annotation
    if isinstance(annotation, type) and issubclass(annotation, AvroRecord):
        return (lambda v: v.to_record()), annotation.from_record
    raise SchemaError(f"{where}: annotation {annotation!r} has no Avro mapping (see records.py)")
