"""Conversion between typed record dataclasses and the dicts fastavro writes and reads.

A record class is a frozen dataclass deriving from :class:`AvroRecord`; its field annotations
decide the conversion, once per class:

=====================  ==========================  ======================================
annotation             Avro type                   written as / read from
=====================  ==========================  ======================================
``str``                string (also logical uuid)  str / str or ``uuid.UUID``
``bytes``              bytes                       as is
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
import hashlib
import os
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
        return _compiled(type(self)).to_record(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """Build from a dict fastavro read (with or without logical-type conversion).

        A field missing from ``record`` takes its default when it has one (null for nullable
        fields). Raises :class:`SchemaError` when a required field is missing or a value does
        not convert (e.g. an unknown enum symbol).
        """
        try:  # every field present and converting: the common case, without the checks below
            return _compiled(cls).from_record(record)  # type: ignore[no-any-return]
        except (KeyError, TypeError, ValueError):
            pass  # a field is missing or does not convert: the default or the error, below
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
    try:
        return (value - _EPOCH) // _ONE_MS  # a naive datetime cannot be subtracted from _EPOCH
    except TypeError:
        if not isinstance(value, datetime):
            raise  # not a datetime at all: the TypeError says what it is
        raise SchemaError(
            f"naive datetime {value!r}: event times must be timezone-aware; "
            "use datetime.now(UTC) or .replace(tzinfo=UTC)."
        ) from None


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
    return uuid_string(os.urandom(16), 4)


def name_uuid(namespace: uuid.UUID, name: str) -> str:
    """``str(uuid.uuid5(namespace, name))``: the name-based (SHA-1) UUID as a string."""
    digest = hashlib.sha1(namespace.bytes + name.encode(), usedforsecurity=False).digest()
    return uuid_string(digest, 5)  # SHA-1 is what RFC 4122 version 5 is defined with


def uuid_string(data: bytes, version: int) -> str:
    """The canonical string of the RFC 4122 UUID of `version` made from `data`'s first 16
    bytes, as ``str(uuid.UUID(bytes=..., version=...))`` gives, without building the object
    (a third of the cost; ids are made per event and per Reward)."""
    raw = bytearray(data[:16])
    raw[6] = (raw[6] & 0x0F) | (version << 4)
    raw[8] = (raw[8] & 0x3F) | 0x80
    x = raw.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def _identity(value: Any) -> Any:
    return value


def _decode_str(value: Any) -> str:
    # fastavro reads logicalType uuid as uuid.UUID; the typed events keep ids as strings.
    return str(value) if isinstance(value, uuid.UUID) else typing.cast(str, value)


def _encode_enum(value: Any) -> str:
    return str(value)  # a StrEnum's str() is its value, the Avro symbol


def _enum_decoder(enum: type[StrEnum]) -> Convert:
    """The member for a symbol: a dict lookup (calling the enum class costs ~1 us); the class
    itself for anything else, which raises ValueError for an unknown symbol."""
    members: dict[Any, StrEnum] = {member.value: member for member in enum}

    def decode(value: Any) -> StrEnum:
        member = members.get(value)
        return enum(value) if member is None else member

    return decode


# Per class, built on first use. A race between threads builds the same tuple twice: harmless.
_CODECS: dict[type, tuple[_FieldCodec, ...]] = {}


def _codecs(cls: type) -> tuple[_FieldCodec, ...]:
    codecs = _CODECS.get(cls)
    if codecs is None:
        codecs = _CODECS[cls] = _build_codecs(cls)
    return codecs


class _Compiled(NamedTuple):
    to_record: Callable[[Any], dict[str, Any]]
    from_record: Callable[[Mapping[str, Any]], Any]  # KeyError when a field is missing


_COMPILED: dict[type, _Compiled] = {}


def _compiled(cls: type) -> _Compiled:
    compiled = _COMPILED.get(cls)
    if compiled is None:
        compiled = _COMPILED[cls] = _compile(cls, _codecs(cls))
    return compiled


def _compile(cls: type, codecs: tuple[_FieldCodec, ...]) -> _Compiled:
    """Both conversions of `cls` as straight-line functions, one expression per field (as
    `dataclasses` builds `__init__`): a loop over the field codecs calling `getattr` and an
    identity function per field cost more than fastavro's own decode of the record (the reward
    joiner converts every event it reads and every Reward it writes). Field names are Python
    identifiers, so they are safe to put in the source."""
    env: dict[str, Any] = {"new": object.__new__, "C": cls}
    # A frozen dataclass's __init__ sets each field through object.__setattr__ (~0.2 us a
    # field); a slots class without __post_init__ is built faster through its slots' own
    # descriptors, with the same result.
    slots = not hasattr(cls, "__post_init__") and all(
        isinstance(getattr(cls, c.name, None), types.MemberDescriptorType) for c in codecs
    )
    fields_out, fields_in = [], []
    for i, codec in enumerate(codecs):
        name = codec.name
        if codec.encode is _identity:
            fields_out.append(f"{name!r}: self.{name}")
        else:
            env[f"e{i}"] = codec.encode
            fields_out.append(f"{name!r}: e{i}(self.{name})")
        value = f"r[{name!r}]"
        if codec.decode is _decode_str:  # a str as is, without a call (uuid.UUID converts)
            env[f"d{i}"] = codec.decode
            value = f"(v if type(v := {value}) is str else d{i}(v))"
        elif codec.decode is not _identity:
            env[f"d{i}"] = codec.decode
            value = f"d{i}({value})"
        if slots:
            env[f"s{i}"] = getattr(cls, name).__set__
            fields_in.append(f"    s{i}(o, {value})\n")
        else:
            fields_in.append(f"{name}={value}")
    build = (
        "    o = new(C)\n" + "".join(fields_in) + "    return o\n"
        if slots
        else f"    return C({', '.join(fields_in)})\n"
    )
    source = (
        f"def to_record(self):\n    return {{{', '.join(fields_out)}}}\n"
        f"def from_record(r):\n{build}"
    )
    # The source is built from the dataclass's own field names only (no outside input).
    exec(compile(source, f"<records of {cls.__name__}>", "exec"), env)  # noqa: S102
    return _Compiled(env["to_record"], env["from_record"])


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
        # These pass None through already: no wrapper call per field.
        return (
            enc if enc is _identity else (lambda v: None if v is None else enc(v)),
            dec if dec in (_identity, _decode_str) else (lambda v: None if v is None else dec(v)),
        )
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
    if annotation in (int, float, bool, bytes):
        return _identity, _identity
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return _encode_enum, _enum_decoder(annotation)
    if isinstance(annotation, type) and issubclass(annotation, AvroRecord):
        return (lambda v: v.to_record()), annotation.from_record
    raise SchemaError(f"{where}: annotation {annotation!r} has no Avro mapping (see records.py)")
