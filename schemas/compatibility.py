"""Avro schema-resolution compatibility, in pure Python, following the Avro specification.

``can_read(reader, writer)`` answers: can every datum written with ``writer`` be decoded with
``reader``? That is the question a schema registry asks for BACKWARD compatibility (the new
schema is the reader); ``check_backward_transitive`` asks it against every earlier version.

Rules (Avro 1.11 specification, "Schema Resolution"):

* records match by unqualified name (or a reader alias); writer-only fields are skipped; a
  reader field absent from the writer (by name or reader field alias) needs a ``default``,
  which must fit the field's type (for a union, its first branch);
* enums match by name; a writer symbol the reader lacks is an error unless the reader enum has
  a ``default`` symbol;
* fixed types match by name and size; arrays by items; maps by values;
* every branch of a writer union must be readable; a reader union reads a value when any of its
  branches can (so a non-union writer is readable when one reader branch reads it);
* primitives must be equal or promotable: int→long/float/double, long→float/double,
  float→double, string↔bytes;
* logical types are ignored: the underlying type decides.

Schemas are the parsed JSON form (``dict``/``list``/``str``), as ``json.loads`` returns them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schemas.errors import SchemaError
from schemas.named_types import (
    AvroSchema,
    NamedTypes,
    deref,
    full_name,
    index_named,
    kind,
    label,
    short_name,
)

# writer type → reader types that can decode it.
_PROMOTIONS: Mapping[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


def can_read(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Incompatibilities that stop ``reader`` from decoding data written with ``writer``.

    Returns an empty list when every datum ``writer`` can produce is readable. Each entry is
    ``"<path>: <problem>"``, the path like ``SuggestionOffered.context[]`` (``[]`` array items,
    ``{}`` map values, ``<type>`` a writer union branch). Raises :class:`SchemaError` when a
    schema is malformed (e.g. it references a named type it never defines).
    """
    root = short_name(str(reader["name"])) if isinstance(reader, dict) and "name" in reader else "$"
    try:
        return _Resolver(reader, writer).check(reader, "", writer, "", root)
    except KeyError as exc:
        raise SchemaError(f"malformed schema: a definition lacks the attribute {exc}") from exc


def check_backward_transitive(new: AvroSchema, previous: Sequence[AvroSchema]) -> list[str]:
    """Incompatibilities of ``new`` (as reader) with each schema in ``previous`` (as writer).

    ``previous[i]`` is version ``i + 1``; each entry is prefixed with ``"version <n>: "``. An
    empty list means ``new`` may be registered under BACKWARD_TRANSITIVE compatibility.
    """
    problems: list[str] = []
    for number, old in enumerate(previous, start=1):
        problems.extend(f"version {number}: {problem}" for problem in can_read(new, old))
    return problems


class _Resolver:
    """Walks a reader and a writer schema side by side; each schema has its own named types."""

    def __init__(self, reader: AvroSchema, writer: AvroSchema) -> None:
        self._reader_names = index_named(reader)
        self._writer_names = index_named(writer)
        # (reader, writer) record pairs being checked further up the stack: a recursive type
        # reaching the same pair again is taken as compatible; the outer check decides.
        self._in_progress: set[tuple[str, str]] = set()

    def check(
        self, reader: AvroSchema, r_ns: str, writer: AvroSchema, w_ns: str, path: str
    ) -> list[str]:
        """Problems reading ``writer`` (names in ``w_ns``) with ``reader`` (names in ``r_ns``)."""
        reader, r_ns = deref(reader, r_ns, self._reader_names)
        writer, w_ns = deref(writer, w_ns, self._writer_names)
        if isinstance(writer, list):  # every value the writer may have written must be readable
            return [
                problem
                for branch in writer
                for problem in self.check(reader, r_ns, branch, w_ns, f"{path}<{label(branch)}>")
            ]
        if isinstance(reader, list):
            if any(not self.check(branch, r_ns, writer, w_ns, path) for branch in reader):
                return []
            branches = ", ".join(label(b) for b in reader)
            return [f"{path}: no branch of reader union [{branches}] reads writer {label(writer)}"]
        if isinstance(reader, str) or isinstance(writer, str):
            r_kind, w_kind = kind(reader), kind(writer)
            if r_kind == w_kind or r_kind in _PROMOTIONS.get(w_kind, frozenset()):
                return []
            return [f"{path}: reader type {r_kind} cannot read writer type {w_kind}"]
        return self._check_complex(reader, r_ns, writer, w_ns, path)

    def _check_complex(
        self, reader: dict[str, Any], r_ns: str, writer: dict[str, Any], w_ns: str, path: str
    ) -> list[str]:
        r_kind, w_kind = kind(reader), kind(writer)
        if {r_kind, w_kind} <= {"record", "error"}:  # an error is a record by another keyword
            r_kind = w_kind = "record"
        if r_kind != w_kind:
            return [
                f"{path}: reader type {label(reader)} ({r_kind}) cannot read writer type "
                f"{label(writer)} ({w_kind})"
            ]
        if r_kind == "array":
            return self.check(reader["items"], r_ns, writer["items"], w_ns, f"{path}[]")
        if r_kind == "map":
            return self.check(reader["values"], r_ns, writer["values"], w_ns, f"{path}{{}}")
        r_full, w_full = full_name(reader, r_ns), full_name(writer, w_ns)
        reader_names = {short_name(r_full)} | {short_name(a) for a in reader.get("aliases", [])}
        if short_name(w_full) not in reader_names:
            return [
                f"{path}: reader {r_kind} {r_full} cannot read writer {w_kind} {w_full} "
                "(names differ; add the writer's name to the reader's aliases if intended)"
            ]
        if r_kind == "enum":
            return _check_enum(reader, writer, path)
        if r_kind == "fixed":
            if reader.get("size") != writer.get("size"):
                return [
                    f"{path}: fixed size {writer.get('size')} written, "
                    f"{reader.get('size')} expected by the reader"
                ]
            return []
        return self._check_record(reader, r_full, writer, w_full, path)

    def _check_record(
        self, reader: dict[str, Any], r_full: str, writer: dict[str, Any], w_full: str, path: str
    ) -> list[str]:
        if (r_full, w_full) in self._in_progress:
            return []
        self._in_progress.add((r_full, w_full))
        try:
            r_ns, w_ns = r_full.rpartition(".")[0], w_full.rpartition(".")[0]
            writer_fields = {field["name"]: field for field in writer.get("fields", [])}
            problems: list[str] = []
            for field in reader.get("fields", []):
                name, field_path = field["name"], f"{path}.{field['name']}"
                candidates = [name, *field.get("aliases", [])]
                match = next((writer_fields[n] for n in candidates if n in writer_fields), None)
                if match is not None:
                    problems += self.check(field["type"], r_ns, match["type"], w_ns, field_path)
                elif "default" in field:
                    problems += _check_default(
                        field["type"], r_ns, field["default"], self._reader_names, field_path
                    )
                else:
                    problems.append(
                        f"{field_path}: field is missing from the writer's schema and has no "
                        "default in the reader's; add a default"
                    )
            return problems
        finally:
            self._in_progress.discard((r_full, w_full))


def _check_enum(reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> list[str]:
    known = set(reader.get("symbols", []))
    unknown = [symbol for symbol in writer.get("symbols", []) if symbol not in known]
    if unknown and "default" not in reader:
        return [
            f"{path}: writer enum symbols {unknown} are missing from the reader's enum, which "
            "has no default symbol; keep the symbols or add a default"
        ]
    return []


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# What a JSON default must look like for each kind of type (spec: field default values).
_DEFAULT_FITS: Mapping[str, Callable[[Any], bool]] = {
    "null": lambda d: d is None,
    "boolean": lambda d: isinstance(d, bool),
    "int": _is_integer,
    "long": _is_integer,
    "float": _is_number,
    "double": _is_number,
    "bytes": lambda d: isinstance(d, str),
    "string": lambda d: isinstance(d, str),
    "fixed": lambda d: isinstance(d, str),
    "array": lambda d: isinstance(d, list),
    "map": lambda d: isinstance(d, dict),
    "record": lambda d: isinstance(d, dict),
    "error": lambda d: isinstance(d, dict),
}


def _check_default(
    schema: AvroSchema, namespace: str, default: Any, names: NamedTypes, path: str
) -> list[str]:
    """A reader default must fit the field's type; for a union, its first branch (spec)."""
    schema, namespace = deref(schema, namespace, names)
    if isinstance(schema, list):
        if not schema:
            return [f"{path}: a union needs at least one branch"]
        return _check_default(schema[0], namespace, default, names, path)
    if isinstance(schema, dict) and kind(schema) == "enum":
        fits = default in schema.get("symbols", [])
    else:
        fits = _DEFAULT_FITS.get(kind(schema), lambda _: False)(default)
    if fits:
        return []
    return [
        f"{path}: default {default!r} does not fit type {label(schema)} (for a union the "
        "default must fit the first branch: put 'null' first for a null default)"
    ]
