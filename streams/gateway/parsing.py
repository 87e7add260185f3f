"""From request bytes to typed events: pure functions, no I/O, unit-tested without a server.

Two steps, so that one bad event never sinks its batch:

1. `parse_body` splits a body into raw items. A body that cannot be split (malformed JSON in an
   `application/json` body, a top-level value that is not an array or an object, bytes that are
   not UTF-8) raises `MalformedBody` (400). In NDJSON each line stands alone: a line that is not
   JSON becomes a raw item carrying its error, refused on its own.
2. `event_type_of` and `build_event` turn one raw item into an `Event` or raise `EventRefused`
   naming the field at fault; the caller records the refusal and goes on with the next item.

JSON form of an event: the Avro record's fields by name plus `"type"` (the schema name);
`event_time` is epoch milliseconds or an ISO-8601 string with a timezone; `event_id` (a UUID)
and `producer` may be left out; enums are their symbols, arrays are lists, maps are objects.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal, NoReturn

from fastavro.validation import ValidationError, validate

from schemas.catalog import parsed_schema
from schemas.events import EVENT_TYPES, Event
from schemas.records import decode_time, encode_time
from streams.gateway.errors import EventRefused, MalformedBody, UnsupportedMediaType
from streams.gateway.reasons import json_kind, schema_violation, short, show

# What the gateway accepts: the kinds IDE clients and agents emit, i.e. the SDK's routes
# (streams.client.ROUTES; a test keeps the two equal).
GATEWAY_EVENT_TYPES: Mapping[str, type[Event]] = MappingProxyType(
    {
        name: EVENT_TYPES[name]
        for name in (
            "SuggestionOffered",
            "SuggestionOutcome",
            "EditObserved",
            "TestRunCompleted",
            "RolloutResult",
            "AgentFeedback",
        )
    }
)

MediaType = Literal["json", "ndjson"]
_MEDIA_TYPES: Mapping[str, MediaType] = {
    "application/json": "json",
    "application/x-ndjson": "ndjson",
    "application/ndjson": "ndjson",
}
TYPE_FIELD = "type"


@dataclass(frozen=True)
class RawItem:
    """One event's JSON value before conversion; `error` is set for an NDJSON line that is not
    JSON (its `value` is then None). `line` is the 1-based NDJSON line, None for JSON bodies."""

    value: Any
    line: int | None = None
    error: str | None = None


def media_type_of(content_type: str | None) -> MediaType:
    """The body format named by a Content-Type header; UnsupportedMediaType (415) otherwise.

    `application/json` (an array of events or one event) and `application/x-ndjson` (one event
    per line) are read, in UTF-8 only.
    """
    media, _, params = (content_type or "").partition(";")
    kind = _MEDIA_TYPES.get(media.strip().lower())
    if kind is None:
        raise UnsupportedMediaType(
            f"Content-Type {content_type or '(none)'!r} is not supported; send "
            "application/json (an array of events) or application/x-ndjson (one event per line)"
        )
    charset = re.search(r"charset\s*=\s*\"?([\w-]+)", params, re.IGNORECASE)
    if charset and charset.group(1).lower().replace("-", "") != "utf8":
        raise UnsupportedMediaType(f"charset {charset.group(1)!r} is not supported; send UTF-8")
    return kind


def parse_body(body: bytes, media_type: MediaType) -> list[RawItem]:
    """The raw items of a request body, in order. MalformedBody (400) when the body as a whole
    cannot be read; see the module docstring for what is refused per item instead."""
    try:
        text = body.decode("utf-8-sig")  # tolerate a byte-order mark
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"the body is not UTF-8 (byte {exc.start}); send UTF-8 JSON") from None
    if not text.strip():
        raise MalformedBody("the body is empty; send a JSON array of events or NDJSON")
    items = _parse_ndjson(text) if media_type == "ndjson" else _parse_json(text)
    if not items:
        raise MalformedBody("the body holds no events; send at least one")
    return items


def _parse_json(text: str) -> list[RawItem]:
    try:
        value = _loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedBody(
            f"malformed JSON at line {exc.lineno} column {exc.colno} (char {exc.pos}): {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, huge ints, absurd nesting
        raise MalformedBody(f"malformed JSON: {short(exc)}") from None
    if isinstance(value, dict):
        return [RawItem(value)]
    if not isinstance(value, list):
        raise MalformedBody(
            f"the body is a JSON {json_kind(value)}; send an array of event objects "
            "(or one event object)"
        )
    return [RawItem(item) for item in value]


def _parse_ndjson(text: str) -> list[RawItem]:
    items = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue  # blank lines, including the one after a trailing newline
        try:
            items.append(RawItem(_loads(line), line=number))
        except json.JSONDecodeError as exc:
            error = f"line {number}: malformed JSON at column {exc.colno}: {exc.msg}"
            items.append(RawItem(None, line=number, error=error))
        except (ValueError, RecursionError) as exc:
            items.append(RawItem(None, line=number, error=f"line {number}: {short(exc)}"))
    return items


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> NoReturn:
    # Python's json reads NaN and Infinity, which are not JSON; other clients would choke on them.
    raise ValueError(f"{name} is not valid JSON")


def event_type_of(item: RawItem) -> str:
    """The schema name an item declares in `"type"`; EventRefused when it is not an object with
    one of the gateway's event types."""
    if item.error is not None:
        raise EventRefused("malformed", item.error)
    if not isinstance(item.value, dict):
        raise EventRefused(
            "malformed", f"{_where(item)}is a JSON {json_kind(item.value)}, not an event object"
        )
    declared = item.value.get(TYPE_FIELD)
    known = ", ".join(GATEWAY_EVENT_TYPES)
    if declared is None:
        raise EventRefused("unknown_type", f"{_where(item)}has no {TYPE_FIELD!r}; one of {known}")
    if not isinstance(declared, str) or declared not in GATEWAY_EVENT_TYPES:
        raise EventRefused(
            "unknown_type", f"unknown event type {show(declared)}; the gateway accepts {known}"
        )
    return declared


def build_event(item: RawItem, event_type: str, default_producer: str) -> Event:
    """The typed event of an item whose type is `event_type` (from `event_type_of`).

    Fills `event_id` (a new UUID4) and `producer` (`default_producer`) when absent, reads
    `event_time` as epoch millis or ISO-8601 with a timezone, then validates the record against
    the Avro schema. Raises EventRefused("invalid", ...) naming every field at fault it finds.
    """
    cls = GATEWAY_EVENT_TYPES[event_type]
    record = {k: v for k, v in item.value.items() if k != TYPE_FIELD}
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in record if k not in names]
    if unknown:  # refused rather than dropped: a misspelt optional field would be lost silently
        raise EventRefused(
            "invalid", f"{event_type}: unknown field(s) {', '.join(map(show, unknown))}"
        )
    if record.get("event_id") is None:
        record["event_id"] = str(uuid.uuid4())
    if record.get("producer") is None:
        record["producer"] = default_producer
    missing = [f.name for f in dataclasses.fields(cls) if _required(f) and f.name not in record]
    if missing:
        raise EventRefused(
            "invalid", f"{event_type}: missing required field(s) {', '.join(missing)}"
        )
    record["event_id"] = _event_id(record["event_id"])
    record["event_time"] = _event_time_ms(record["event_time"])
    _validate(event_type, record)
    try:
        return cls.from_record(record)
    except Exception as exc:  # validated above, so only an unforeseen value lands here
        raise EventRefused("invalid", f"{event_type}: {short(exc)}") from None


def _required(field: dataclasses.Field[Any]) -> bool:
    # event_time has a default factory for SDK users, but over HTTP the client's clock is required.
    no_default = field.default is dataclasses.MISSING
    return field.name == "event_time" or (
        no_default and field.default_factory is dataclasses.MISSING
    )


def _event_id(value: Any) -> str:
    """The canonical form of a client's event id. The schema's logicalType is uuid: a stock
    Avro reader fails on any other string, so a non-UUID is refused here, not downstream."""
    try:
        if isinstance(value, str):
            return str(uuid.UUID(value))
    except ValueError:
        pass
    raise EventRefused("invalid", f"event_id {show(value)} is not a UUID")


def _event_time_ms(value: Any) -> int:
    """Epoch milliseconds from an int (as is) or an ISO-8601 string with a timezone."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise EventRefused(
                "invalid", f"event_time {show(value)} is not ISO-8601 (e.g. 2025-01-31T12:00:00Z)"
            ) from None
        if parsed.tzinfo is None:
            raise EventRefused(
                "invalid", f"event_time {show(value)} has no timezone; add Z or +HH:MM"
            )
        return encode_time(parsed)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            decode_time(value)
        except OverflowError:
            raise EventRefused("invalid", f"event_time {value} ms is out of range") from None
        return value
    raise EventRefused(
        "invalid",
        f"event_time must be epoch milliseconds (an integer) or an ISO-8601 string, "
        f"not a JSON {json_kind(value)}",
    )


def _validate(event_type: str, record: dict[str, Any]) -> None:
    try:
        validate(record, parsed_schema(event_type), raise_errors=True)
    except ValidationError as exc:
        raise EventRefused("invalid", schema_violation(event_type, exc)) from None


def _where(item: RawItem) -> str:
    return f"line {item.line} " if item.line is not None else ""
