"""Avro names: full names, namespaces, and following name references to their definitions.

Schemas here are the parsed JSON form. A named type (record, error, enum, fixed) is defined once
and may then be referenced by name; a short name resolves in the enclosing namespace first, then
in the null namespace (as the Java implementation does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from schemas.errors import SchemaError

# Parsed-JSON Avro schema: a type name, a union (list), or a complex/annotated type (dict).
AvroSchema = str | list[Any] | dict[str, Any]

# full name → (definition, the namespace names inside it resolve in)
NamedTypes = Mapping[str, tuple[dict[str, Any], str]]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})


def full_name(schema: Mapping[str, Any], enclosing: str) -> str:
    """Full name of a named type defined inside namespace ``enclosing``.

    Raises :class:`SchemaError` when the definition has no ``name``.
    """
    name = schema.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"a named type has no valid 'name': {dict(schema)!r}; add one.")
    if "." in name:
        return name
    namespace = schema.get("namespace", enclosing) or ""
    return f"{namespace}.{name}" if namespace else name


def short_name(name: str) -> str:
    """``flywheel.v1.Decision`` → ``Decision``."""
    return name.rpartition(".")[2]


def kind(schema: AvroSchema) -> str:
    """``union`` for a list, else the type keyword (``record``, ``array``, ``int``, ...)."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    keyword = schema.get("type")
    if not isinstance(keyword, str):
        raise SchemaError(f"schema {schema!r} has no valid 'type'; add one.")
    return keyword


def label(schema: AvroSchema) -> str:
    """Short human-readable name of a type for messages: ``Decision``, ``string``, ``array``."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return short_name(schema)
    if isinstance(schema.get("name"), str):
        return short_name(str(schema["name"]))
    return label(schema.get("type", "?"))


def index_named(schema: AvroSchema, namespace: str = "") -> dict[str, tuple[dict[str, Any], str]]:
    """Every named type ``schema`` defines, by full name (see :data:`NamedTypes`)."""
    return dict(_walk_named(schema, namespace))


def _walk_named(
    schema: AvroSchema, namespace: str
) -> Iterator[tuple[str, tuple[dict[str, Any], str]]]:
    if isinstance(schema, list):
        for branch in schema:
            yield from _walk_named(branch, namespace)
        return
    if not isinstance(schema, dict):
        return  # a primitive or a reference defines nothing
    keyword = schema.get("type")
    if not isinstance(keyword, str):  # {"type": {...}} wraps a nested definition
        yield from _walk_named(keyword if keyword is not None else "null", namespace)
        return
    if keyword in NAMED_KINDS:
        name = full_name(schema, namespace)
        own = name.rpartition(".")[0]
        yield name, (schema, own)
        if keyword in {"record", "error"}:
            for field in schema.get("fields", []):
                yield from _walk_named(field.get("type", "null"), own)
    elif keyword == "array":
        yield from _walk_named(schema.get("items", "null"), namespace)
    elif keyword == "map":
        yield from _walk_named(schema.get("values", "null"), namespace)


def deref(schema: AvroSchema, namespace: str, names: NamedTypes) -> tuple[AvroSchema, str]:
    """Follow name references and ``{"type": ...}`` wrappers to a concrete schema.

    Returns a primitive as its bare name (``{"type": "string", "logicalType": "uuid"}`` becomes
    ``"string"``: logical types do not affect resolution), a union as its list, and any other
    type as its defining dict, each with the namespace names inside it resolve in. Raises
    :class:`SchemaError` for a reference to a type ``names`` does not hold.
    """
    while True:
        if isinstance(schema, list):
            return schema, namespace
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return schema, namespace
            qualified = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            found = names.get(qualified) or names.get(schema)
            if found is None:
                raise SchemaError(
                    f"the schema references type {schema!r} but never defines it; define it "
                    "before its first use (each .avsc must be self-contained)."
                )
            return found
        keyword = schema.get("type")
        if keyword in NAMED_KINDS:
            return schema, full_name(schema, namespace).rpartition(".")[0]
        if keyword in {"array", "map"}:
            return schema, namespace
        if keyword is None:
            raise SchemaError(f"schema {schema!r} has no 'type'; add one.")
        # An annotated primitive, a wrapped reference, or a wrapped nested type.
        schema = keyword
