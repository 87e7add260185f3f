"""schemas.compatibility: known-compatible and known-incompatible reader/writer pairs."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.catalog import load_schema
from schemas.compatibility import can_read, check_backward_transitive
from schemas.errors import SchemaError


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "fields": list(fields), **extra}


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def enum(*symbols: str, name: str = "E", **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


COMPATIBLE: dict[str, tuple[Any, Any]] = {  # id → (reader, writer)
    "identical record": (record(field("a", "int")), record(field("a", "int"))),
    "reader adds a field with a default": (
        record(field("a", "int"), field("b", ["null", "string"], default=None)),
        record(field("a", "int")),
    ),
    "reader adds a field with a non-null default": (
        record(field("a", "int"), field("b", "string", default="x")),
        record(field("a", "int")),
    ),
    "writer-only field is skipped": (
        record(field("a", "int")),
        record(field("a", "int"), field("b", "int")),
    ),
    "int to long": ("long", "int"),
    "int to float": ("float", "int"),
    "int to double": ("double", "int"),
    "long to float": ("float", "long"),
    "long to double": ("double", "long"),
    "float to double": ("double", "float"),
    "string to bytes": ("bytes", "string"),
    "bytes to string": ("string", "bytes"),
    "reader enum has more symbols": (enum("A", "B", "C"), enum("A", "B")),
    "reader enum lacks a symbol but has a default": (enum("A", default="A"), enum("A", "B")),
    "plain writer read by a union": (["null", "string"], "string"),
    "plain writer promoted into a union branch": (["null", "long"], "int"),
    "writer union read by a wider union": (["null", "string", "int"], ["null", "string"]),
    "union branches promote": (["null", "double"], ["null", "int"]),
    "union branch order does not matter": (["string", "null"], ["null", "string"]),
    "array items promote": ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}),
    "map values promote": ({"type": "map", "values": "double"}, {"type": "map", "values": "float"}),
    "fixed of the same name and size": (
        {"type": "fixed", "name": "F", "size": 16},
        {"type": "fixed", "name": "F", "size": 16},
    ),
    "logical type dropped": ("long", {"type": "long", "logicalType": "timestamp-millis"}),
    "logical type added": ({"type": "string", "logicalType": "uuid"}, "string"),
    "renamed field matched by reader alias": (
        record(field("new_name", "int", aliases=["old_name"])),
        record(field("old_name", "int")),
    ),
    "renamed record matched by reader alias": (
        record(field("a", "int"), name="New", aliases=["Old"]),
        record(field("a", "int"), name="Old"),
    ),
    "namespace differs, name equal": (
        {**record(field("a", "int")), "namespace": "v2"},
        {**record(field("a", "int")), "namespace": "v1"},
    ),
    "named type referenced by name": (
        record(field("x", enum("A", "B")), field("y", "E")),
        record(field("x", enum("A")), field("y", "t.E")),
    ),
    "recursive type": (
        record(field("v", "long"), field("next", ["null", "R"], default=None)),
        record(field("v", "int"), field("next", ["null", "R"], default=None)),
    ),
    "error read as record": (
        record(field("a", "int")),
        {"type": "error", "name": "R", "namespace": "t", "fields": [field("a", "int")]},
    ),
}

INCOMPATIBLE: dict[str, tuple[Any, Any, str]] = {  # id → (reader, writer, expected text)
    "reader adds a field without default": (
        record(field("a", "int"), field("b", "int")),
        record(field("a", "int")),
        "R.b: field is missing from the writer's schema and has no default",
    ),
    "long to int": ("int", "long", "reader type int cannot read writer type long"),
    "double to float": ("float", "double", "reader type float cannot read writer type double"),
    "string to int": ("int", "string", "reader type int cannot read writer type string"),
    "float to long": ("long", "float", "reader type long cannot read writer type float"),
    "enum symbol removed without default": (
        enum("A"),
        enum("A", "B"),
        "writer enum symbols ['B'] are missing",
    ),
    "nullable writer, plain reader": (
        record(field("s", "string")),
        record(field("s", ["null", "string"], default=None)),
        "R.s<null>: reader type string cannot read writer type null",
    ),
    "writer union wider than reader union": (
        ["null", "string"],
        ["null", "string", "int"],
        "$<int>: no branch of reader union [null, string] reads writer int",
    ),
    "plain writer not in reader union": (["null", "int"], "string", "no branch of reader union"),
    "record names differ": (
        record(field("a", "int"), name="A"),
        record(field("a", "int"), name="B"),
        "names differ",
    ),
    "enum names differ": (enum("A", name="X"), enum("A", name="Y"), "names differ"),
    "fixed sizes differ": (
        {"type": "fixed", "name": "F", "size": 8},
        {"type": "fixed", "name": "F", "size": 16},
        "fixed size 16 written, 8 expected",
    ),
    "array read as map": (
        {"type": "map", "values": "int"},
        {"type": "array", "items": "int"},
        "(map) cannot read writer type array (array)",
    ),
    "array items narrow": (
        record(field("xs", {"type": "array", "items": "int"})),
        record(field("xs", {"type": "array", "items": "long"})),
        "R.xs[]: reader type int cannot read writer type long",
    ),
    "map values narrow": (
        record(field("m", {"type": "map", "values": "float"})),
        record(field("m", {"type": "map", "values": "double"})),
        "R.m{}: reader type float",
    ),
    "nested record gains a required field": (
        record(field("inner", record(field("a", "int"), field("b", "int"), name="In"))),
        record(field("inner", record(field("a", "int"), name="In"))),
        "R.inner.b: field is missing",
    ),
    "default does not fit the first union branch": (
        record(field("a", "int"), field("b", ["string", "null"], default=None)),
        record(field("a", "int")),
        "R.b: default None does not fit type string",
    ),
    "default of the wrong type": (
        record(field("a", "int"), field("b", "int", default="zero")),
        record(field("a", "int")),
        "R.b: default 'zero' does not fit type int",
    ),
    "enum default not a symbol": (
        record(field("a", "int"), field("e", enum("A", "B"), default="C")),
        record(field("a", "int")),
        "R.e: default 'C' does not fit type E",
    ),
    "recursive type narrows inside the recursion": (
        record(field("v", "int"), field("next", ["null", "R"], default=None)),
        record(field("v", "long"), field("next", ["null", "R"], default=None)),
        "R.v: reader type int cannot read writer type long",
    ),
}


@pytest.mark.parametrize(("reader", "writer"), COMPATIBLE.values(), ids=COMPATIBLE.keys())
def test_compatible_pairs(reader: Any, writer: Any) -> None:
    assert can_read(reader, writer) == []


@pytest.mark.parametrize(
    ("reader", "writer", "expected"), INCOMPATIBLE.values(), ids=INCOMPATIBLE.keys()
)
def test_incompatible_pairs(reader: Any, writer: Any, expected: str) -> None:
    problems = can_read(reader, writer)
    assert any(expected in p for p in problems), problems


def test_every_problem_is_reported_not_just_the_first() -> None:
    reader = record(field("a", "int"), field("b", "int"), field("c", "string"))
    writer = record(field("a", "long"), field("c", "int"))
    assert len(can_read(reader, writer)) == 3


def test_backward_transitive_checks_every_version_and_names_it() -> None:
    v1 = record(field("a", "int"))
    v2 = record(field("a", "int"), field("b", "int", default=0))
    new = record(field("a", "int"), field("b", "int"))  # fine for v2's data, not for v1's
    assert check_backward_transitive(new, [v2]) == []
    problems = check_backward_transitive(new, [v1, v2])
    assert problems == [
        "version 1: R.b: field is missing from the writer's schema and has no default in the "
        "reader's; add a default"
    ]


def test_undefined_named_type_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="never defines it"):
        can_read(record(field("x", "Missing")), record(field("x", "int")))


def test_missing_attribute_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="lacks the attribute 'items'"):
        can_read({"type": "array"}, {"type": "array", "items": "int"})


def test_breaking_changes_to_a_real_schema_are_caught() -> None:
    current = load_schema("SuggestionOffered")
    narrowed = load_schema("SuggestionOffered")
    for f in narrowed["fields"]:
        if f["name"] == "propensity":
            f["type"] = "float"
    narrowed["fields"].append(field("new_required", "int", doc="x"))
    problems = can_read(narrowed, current)
    assert problems == [
        "SuggestionOffered.propensity: reader type float cannot read writer type double",
        "SuggestionOffered.new_required: field is missing from the writer's schema and has no "
        "default in the reader's; add a default",
    ]


def test_dropping_an_enum_symbol_from_a_real_schema_is_caught() -> None:
    current = load_schema("ModelVersionEvent")
    changed = load_schema("ModelVersionEvent")
    event_type = next(f for f in changed["fields"] if f["name"] == "event_type")
    event_type["type"]["symbols"].remove("ROLLED_BACK")
    assert can_read(changed, current) == [
        "ModelVersionEvent.event_type: writer enum symbols ['ROLLED_BACK'] are missing from the "
        "reader's enum, which has no default symbol; keep the symbols or add a default"
    ]
