"""Refusal reasons in a client's words: schema violations, JSON kinds, clipped values.

Reasons quote what the client sent, clipped to a few dozen characters, so a huge bad value
cannot blow up a response (or a log line).
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastavro.validation import ValidationError

from schemas.catalog import parsed_schema

_MAX_SHOWN = 80  # characters of a client's value quoted back in a reason

# fastavro says "flywheel.v1.SuggestionOutcome.accepted_chars is <True> of type <class 'bool'>
# expected int", or "Field(flywheel.v1.SuggestionOutcome.session_id) is None expected string";
# clients get "field 'accepted_chars' must be int, got bool True".
_FASTAVRO_ERRORS = (
    re.compile(r"^(?:[\w.]*\.)?(?P<record>\w+)\.(?P<path>\S+) is <(?P<value>.*)> "
               r"of type <class '(?P<kind>\w+)'> expected .*$", re.S),
    re.compile(r"^Field\((?:[\w.]*\.)?(?P<record>\w+)\.(?P<path>\S+)\) is None expected .*$", re.S),
)  # fmt: skip


def schema_violation(event_type: str, error: ValidationError) -> str:
    """`<event_type>: field 'x' must be <type>, got <kind> <value>` for each field fastavro
    flagged (it stops at the first bad field of a record); its own words when unrecognised."""
    reasons = "; ".join(_field_error(event_type, str(e)) for e in error.errors)
    return f"{event_type}: {reasons}"


def _field_error(event_type: str, message: str) -> str:
    for pattern in _FASTAVRO_ERRORS:
        match = pattern.match(message)
        if match is not None and match["record"] == event_type:
            break
    else:
        return clip(message)
    path = match["path"]
    fields = {f["name"]: f["type"] for f in parsed_schema(event_type)["fields"]}
    top = path.split(".")[0]
    expected = _describe(fields[top]) if top in fields else "as the schema says"
    groups = match.groupdict()
    got = f"{groups['kind']} {clip(groups['value'])}" if "value" in groups else "null"
    return f"field {path!r} must be {expected}, got {got}"


def _describe(avro_type: Any) -> str:
    """An Avro type in a client's words: `int`, `one of SHOWN, SUPPRESSED`, `an array of float`."""
    if isinstance(avro_type, list):
        return " or ".join(_describe(t) for t in avro_type)
    if isinstance(avro_type, str):
        return avro_type
    kind = avro_type.get("type")
    if kind == "enum":
        return "one of " + ", ".join(avro_type["symbols"])
    if kind == "array":
        return f"an array of {_describe(avro_type['items'])}"
    if kind == "map":
        return f"an object of {_describe(avro_type['values'])}"
    return _describe(kind) if isinstance(kind, str | list) else "a record"


def json_kind(value: Any) -> str:
    """The JSON name of a decoded value's type: object, array, string, number, boolean, null."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def show(value: Any) -> str:
    """A client's value as it would quote it (strings in quotes), clipped."""
    return clip(repr(value) if isinstance(value, str) else json.dumps(value))


def short(exc: BaseException) -> str:
    """`ExceptionType: message`, clipped."""
    return clip(f"{type(exc).__name__}: {exc}")


def clip(text: str) -> str:
    """`text`, cut to at most 80 characters with an ellipsis."""
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."
