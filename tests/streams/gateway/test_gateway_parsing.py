"""Request bodies to events, without a server: the per-event and whole-body refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schemas.enums import Outcome
from schemas.events import SuggestionOffered, SuggestionOutcome
from streams.client import ROUTES
from streams.gateway.errors import EventRefused, MalformedBody, UnsupportedMediaType
from streams.gateway.parsing import (
    GATEWAY_EVENT_TYPES,
    RawItem,
    build_event,
    event_type_of,
    media_type_of,
    parse_body,
)

EVENT_ID = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"


def outcome(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "type": "SuggestionOutcome", "event_id": EVENT_ID, "event_time": 1_700_000_000_123,
        "suggestion_id": "sg-1", "session_id": "s-1", "outcome": "ACCEPTED",
        "accepted_chars": 12, "time_to_decision_ms": 900,
    }  # fmt: skip
    fields.update(overrides)
    return fields


def convert(value: Any) -> Any:
    item = RawItem(value)
    return build_event(item, event_type_of(item), "gateway/k1")


def refusal(value: Any) -> EventRefused:
    with pytest.raises(EventRefused) as refused:
        convert(value)
    return refused.value


def test_the_gateway_accepts_exactly_what_the_sdk_sends() -> None:
    # ...except served completions: serving replicas emit them, never clients.
    assert set(GATEWAY_EVENT_TYPES) == {cls.SCHEMA_NAME for cls in ROUTES} - {"AgentCompletion"}


@pytest.mark.parametrize(
    ("header", "kind"),
    [
        ("application/json", "json"),
        ("Application/JSON; charset=utf-8", "json"),
        ("application/x-ndjson", "ndjson"),
        ("application/ndjson; charset=UTF-8", "ndjson"),
    ],
)
def test_media_types(header: str, kind: str) -> None:
    assert media_type_of(header) == kind


@pytest.mark.parametrize(
    "header", [None, "", "text/plain", "multipart/form-data", "application/json; charset=latin-1"]
)
def test_other_media_types_are_refused(header: str | None) -> None:
    with pytest.raises(UnsupportedMediaType, match=r"application/json|UTF-8"):
        media_type_of(header)


def test_a_json_array_an_object_and_ndjson_give_items_in_order() -> None:
    assert [i.value for i in parse_body(b'[{"a": 1}, 2]', "json")] == [{"a": 1}, 2]
    assert [i.value for i in parse_body(b'{"a": 1}', "json")] == [{"a": 1}]
    items = parse_body(b'{"a": 1}\n\n  \r\n{"b": 2}\r\n', "ndjson")
    assert [(i.value, i.line) for i in items] == [({"a": 1}, 1), ({"b": 2}, 4)]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'[{"type": "SuggestionOutcome",', "line 1 column 31"),
        (b'[\n{"a": 1},\n{"a": }\n]', "line 3 column 7"),
        (b'"just a string"', "JSON string"),
        (b"42", "JSON number"),
        (b"null", "JSON null"),
        (b"[]", "no events"),
        (b"", "empty"),
        (b"  \n ", "empty"),
        (b"\xff\xfe[]", "not UTF-8"),
        (b'[{"x": NaN}]', "NaN is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
        (b"[" + b"9" * 5000 + b"]", "malformed JSON"),  # more digits than Python converts
    ],
)
def test_unreadable_json_bodies_are_refused_with_a_position(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedBody, match=reason):
        parse_body(body, "json")


def test_one_bad_ndjson_line_is_refused_alone() -> None:
    body = b'{"a": 1}\n{"a": \n[1, 2]\n{"b": 2}\n'
    items = parse_body(body, "ndjson")
    assert [i.value for i in items] == [{"a": 1}, None, [1, 2], {"b": 2}]
    assert items[1].error is not None
    assert "line 2" in items[1].error
    with pytest.raises(EventRefused, match="line 2: malformed JSON") as refused:
        event_type_of(items[1])
    assert refused.value.code == "malformed"
    with pytest.raises(EventRefused, match="line 3 is a JSON array, not an event object"):
        event_type_of(items[2])


def test_a_valid_event_converts_with_its_fields() -> None:
    event = convert(outcome(producer="ide/x"))
    assert event == SuggestionOutcome(
        event_id=EVENT_ID,
        event_time=event.event_time,
        producer="ide/x",
        suggestion_id="sg-1",
        session_id="s-1",
        outcome=Outcome.ACCEPTED,
        accepted_chars=12,
        time_to_decision_ms=900,
    )
    assert int(event.event_time.timestamp() * 1000) == 1_700_000_000_123


def test_missing_event_id_and_producer_are_filled_in() -> None:
    raw = outcome()
    del raw["event_id"]
    first, second = convert(raw), convert(raw)
    assert first.producer == "gateway/k1"
    assert first.event_id != second.event_id
    assert len(first.event_id) == 36


def test_event_ids_are_canonical_uuids() -> None:
    assert convert(outcome(event_id=EVENT_ID.upper())).event_id == EVENT_ID


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("2023-11-14T22:13:20.123Z", 1_700_000_000_123),
        ("2023-11-14T23:13:20.123+01:00", 1_700_000_000_123),
        ("2023-11-14T22:13:20.123999+00:00", 1_700_000_000_123),  # floored to the millisecond
    ],
)
def test_event_time_reads_iso_8601_with_a_timezone(text: str, millis: int) -> None:
    event = convert(outcome(event_time=text))
    assert round(event.event_time.timestamp() * 1000) == millis


def test_a_full_suggestion_offered_converts() -> None:
    raw = {
        "type": "SuggestionOffered", "event_time": "2025-01-31T12:00:00Z",
        "suggestion_id": "sg", "request_id": "r", "session_id": "s", "user_id": "u",
        "repo_id": "r", "language": "python", "ide": "vscode", "trigger": "INVOKED",
        "model_name": "gate", "model_version": 1, "decision": "SHOWN", "propensity": 1,
        "context": [0.5, 1], "context_spec": "ctx@1", "suggestion_chars": 3,
        "suggestion_lines": 1, "latency_ms": 5, "privacy_mode": True,
    }  # fmt: skip
    event = convert(raw)
    assert isinstance(event, SuggestionOffered)
    assert event.context == (0.5, 1)
    assert event.suggestion_text is None  # nullable and absent


@pytest.mark.parametrize(
    ("raw", "code", "reason"),
    [
        ([1, 2], "malformed", "JSON array, not an event object"),
        ("text", "malformed", "JSON string"),
        ({"session_id": "s"}, "unknown_type", "has no 'type'; one of SuggestionOffered"),
        (outcome(type="Reward"), "unknown_type", "unknown event type 'Reward'; the gateway"),
        (outcome(type=7), "unknown_type", "unknown event type 7"),
        (outcome(outcome="MAYBE"), "invalid", "'outcome' must be one of ACCEPTED, REJECTED"),
        (outcome(accepted_chars="12"), "invalid", "'accepted_chars' must be int, got str 12"),
        (outcome(accepted_chars=True), "invalid", "'accepted_chars' must be int, got bool"),
        (outcome(accepted_chars=2**40), "invalid", "'accepted_chars' must be int"),
        (outcome(time_to_decision_ms=1.5), "invalid", "'time_to_decision_ms' must be long"),
        (outcome(session_id=None), "invalid", "'session_id' must be string, got null"),
        (outcome(sesion_id="s"), "invalid", "unknown field(s) 'sesion_id'"),
        (outcome(event_id="not-a-uuid"), "invalid", "event_id 'not-a-uuid' is not a UUID"),
        (outcome(event_id=12), "invalid", "event_id 12 is not a UUID"),
        (outcome(event_time="yesterday"), "invalid", "event_time 'yesterday' is not ISO-8601"),
        (outcome(event_time="2025-01-31T12:00:00"), "invalid", "has no timezone"),
        (outcome(event_time=1.7e12), "invalid", "epoch milliseconds (an integer)"),
        (outcome(event_time=True), "invalid", "not a JSON boolean"),
        (outcome(event_time=10**30), "invalid", "out of range"),
    ],
)
def test_bad_events_are_refused_naming_the_fault(raw: Any, code: str, reason: str) -> None:
    refused = refusal(raw)
    assert refused.code == code
    assert reason in str(refused)


@pytest.mark.parametrize("field", ["outcome", "accepted_chars", "event_time"])
def test_missing_required_fields_are_named(field: str) -> None:
    raw = outcome()
    del raw[field]
    refused = refusal(raw)
    assert refused.code == "invalid"
    assert str(refused) == f"SuggestionOutcome: missing required field(s) {field}"


def test_maps_and_arrays_are_checked() -> None:
    raw = {
        "type": "RolloutResult", "event_time": 1, "rollout_id": "ro", "task_id": "t",
        "group_id": "g", "model_name": "m", "model_version": 1, "prompt_tokens": 1,
        "completion_tokens": 1, "tool_calls": 0, "tests_passed": 1, "tests_total": 1,
        "reward_components": {"tests": "high"}, "behaviour_logprobs": [], "duration_ms": 1,
    }  # fmt: skip
    assert "'reward_components' must be an object of double" in str(refusal(raw))
    raw["reward_components"] = {"tests": 1.0}
    raw["behaviour_logprobs"] = "abc"
    assert "'behaviour_logprobs' must be an array of float" in str(refusal(raw))


def test_long_values_are_clipped_in_reasons() -> None:
    reason = str(refusal(outcome(type="X" * 10_000)))
    assert len(reason) < 300


def test_every_json_event_survives_a_round_trip_through_json() -> None:
    """What a client serialises from an SDK event (record + type) converts back to it."""
    from tests.sample_events import one_of_each

    for event in one_of_each():
        raw = json.loads(json.dumps({"type": event.SCHEMA_NAME, **event.to_record()}))
        assert convert(raw) == event
