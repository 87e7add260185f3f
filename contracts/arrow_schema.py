"""Avro record schema -> Arrow schema of the lake's Parquet files (DESIGN §6).

Mapping (a pure function of the schema, so every file of a topic written with one schema
version has the same columns):

| Avro                                  | Arrow                                     |
|---------------------------------------|-------------------------------------------|
| string, string/uuid                   | string                                    |
| bytes / fixed(n)                      | binary / fixed_size_binary(n)             |
| int / long                            | int32 / int64                             |
| float / double                        | float32 / float64                         |
| boolean                               | bool                                      |
| long/timestamp-millis (-micros)       | timestamp("ms" / "us", tz="UTC")          |
| long/local-timestamp-millis (-micros) | timestamp("ms" / "us") (no zone)          |
| int/date, int/time-millis             | date32, time32("ms")                      |
| enum                                  | string (symbols kept in field metadata)   |
| array<T> / map<T>                     | list<T> / map<string, T>                  |
| record                                | struct                                    |
| ["null", T] (either order)            | T, nullable                               |

Enums are plain strings, not dictionary<int32, string>: Parquet dictionary-encodes repeated
strings on disk anyway, so the files are as small, and every reader (DuckDB, pandas, the learner)
sees an ordinary string column with no per-file dictionaries to unify. Fields that are not a
nullable union are `nullable=False`. Unions of two or more non-null types are refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from contracts.errors import UnsupportedSchemaError

KAFKA_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("_topic", pa.string(), nullable=False),
    pa.field("_partition", pa.int32(), nullable=False),
    pa.field("_offset", pa.int64(), nullable=False),
)
ENUM_SYMBOLS_KEY = b"avro.enum.symbols"
SCHEMA_NAME_KEY = b"flywheel.avro.schema"

_PRIMITIVES: Mapping[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL: Mapping[tuple[str, str], pa.DataType] = {
    ("string", "uuid"): pa.string(),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
}


def arrow_schema(avro: Mapping[str, Any]) -> pa.Schema:
    """The lake schema of records written with the Avro record schema `avro` (parsed JSON, as
    `schemas.catalog.load_schema` returns it): one column per field, in order, then `_topic`
    (string), `_partition` (int32) and `_offset` (int64).

    Raises UnsupportedSchemaError when `avro` is not a record or uses a type with no column form.
    """
    if not isinstance(avro, Mapping) or avro.get("type") != "record":
        raise UnsupportedSchemaError(
            f"a lake table needs an Avro record schema, got {_describe(avro)}"
        )
    names: dict[str, pa.DataType] = {}
    struct = _named(avro, avro.get("namespace"), names)
    fields = [struct.field(i) for i in range(struct.num_fields)]
    taken = {f.name for f in fields} & {f.name for f in KAFKA_COLUMNS}
    if taken:
        raise UnsupportedSchemaError(
            f"{avro.get('name')} has field(s) {sorted(taken)}, which the lake reserves for Kafka "
            "coordinates; rename them in the schema"
        )
    metadata = {SCHEMA_NAME_KEY: _fullname(avro, avro.get("namespace")).encode()}
    return pa.schema([*fields, *KAFKA_COLUMNS], metadata=metadata)


def field_type(avro_type: Any, names: dict[str, pa.DataType] | None = None) -> pa.Field:
    """One Avro field type as an Arrow field named `value` (nullable only for ["null", T]).

    `names` maps the full and short names of named types seen so far to their Arrow types, so a
    later reference by name resolves; pass the same dict across calls for one schema.
    """
    return _field("value", avro_type, None, {} if names is None else names)


def _field(name: str, avro_type: Any, namespace: str | None, names: dict[str, Any]) -> pa.Field:
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        if len(branches) != 1 or len(avro_type) > 2:
            raise UnsupportedSchemaError(
                f"field {name!r}: union {json.dumps(avro_type)} has no column form; only "
                '["null", T] (an optional T) is supported'
            )
        inner = _field(name, branches[0], namespace, names)
        return inner.with_nullable(len(avro_type) == 2)
    data_type = _type(avro_type, namespace, names)
    metadata = None
    if isinstance(avro_type, Mapping) and avro_type.get("type") == "enum":
        metadata = {ENUM_SYMBOLS_KEY: json.dumps(avro_type["symbols"]).encode()}
    return pa.field(name, data_type, nullable=data_type == pa.null(), metadata=metadata)


def _type(avro_type: Any, namespace: str | None, names: dict[str, Any]) -> pa.DataType:
    if isinstance(avro_type, str):
        if avro_type in _PRIMITIVES:
            return _PRIMITIVES[avro_type]
        for candidate in (avro_type, f"{namespace}.{avro_type}"):
            if candidate in names:
                if names[candidate] is None:
                    raise UnsupportedSchemaError(
                        f"{avro_type} refers to itself; a recursive record has no column form"
                    )
                return names[candidate]
        raise UnsupportedSchemaError(f"unknown Avro type name {avro_type!r}; define it first")
    if not isinstance(avro_type, Mapping):
        raise UnsupportedSchemaError(f"not an Avro type: {_describe(avro_type)}")
    kind = avro_type.get("type")
    logical = avro_type.get("logicalType")
    if isinstance(kind, str) and isinstance(logical, str) and (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)]
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(avro_type["precision"]), int(avro_type.get("scale", 0)))
    if kind in ("record", "enum", "fixed"):
        return _named(avro_type, namespace, names)
    if kind == "array":
        item = _field("item", avro_type["items"], namespace, names)
        return pa.list_(item)
    if kind == "map":
        value = _field("value", avro_type["values"], namespace, names)
        return pa.map_(pa.field("key", pa.string(), nullable=False), value)
    # {"type": "long"} and unknown logical types on a primitive read as the primitive.
    return _type(kind, namespace, names)


def _named(avro_type: Mapping[str, Any], namespace: str | None, names: dict[str, Any]) -> Any:
    """Arrow type of a record, enum or fixed; registered under its full and short name."""
    fullname = _fullname(avro_type, namespace)
    inner_namespace = fullname.rpartition(".")[0] or None
    kind = avro_type["type"]
    if kind == "enum":
        data_type = pa.string()
    elif kind == "fixed":
        data_type = pa.binary(int(avro_type["size"]))
    else:
        # Registered before its fields so a recursive reference fails clearly below, not forever.
        names[fullname] = None
        fields = [_field(f["name"], f["type"], inner_namespace, names) for f in avro_type["fields"]]
        data_type = pa.struct(fields)
    names[fullname] = data_type
    names.setdefault(str(avro_type["name"]).rpartition(".")[2], data_type)
    return data_type


def _fullname(avro_type: Mapping[str, Any], namespace: str | None) -> str:
    name = str(avro_type["name"])
    if "." in name:
        return name
    space = avro_type.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _describe(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
