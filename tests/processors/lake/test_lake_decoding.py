"""Causes of refused records and the value rules, with a stand-in codec (no registry)."""

from __future__ import annotations

import io
import math
from typing import Any

import fastavro
import pytest

from contracts.errors import RecordRejected
from processors.lake.decoding import CAUSES, RecordDecoder
from processors.lake.validation import RecordValidator
from schemas.catalog import load_schema, parsed_schema
from streams.errors import DecodeError
from tests.sample_events import offered

SUGGESTION_FIELDS = tuple(f["name"] for f in load_schema("SuggestionOffered")["fields"])


class FakeCodec:
    """Decodes plain Avro bodies of SuggestionOffered the way the codec reports failures."""

    def __init__(self, fail: DecodeError | None = None) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def decode(self, topic: str, data: bytes) -> dict[str, Any]:
        self.calls.append(topic)
        if self.fail is not None:
            raise self.fail
        try:
            record = fastavro.schemaless_reader(
                io.BytesIO(data), parsed_schema("SuggestionOffered")
            )
        except Exception as exc:  # the codec's wording
            raise DecodeError(
                "invalid_body", f"body does not decode with schema 1: {exc!r}"
            ) from None
        assert isinstance(record, dict)
        return record


def body(**overrides: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out, parsed_schema("SuggestionOffered"), offered("s-1", **overrides).to_record()
    )
    return out.getvalue()


def decoder(codec: FakeCodec, max_record_bytes: int = 10_000) -> RecordDecoder:
    return RecordDecoder(
        codec, "telemetry.suggestions", RecordValidator(SUGGESTION_FIELDS), max_record_bytes
    )


def rejection(codec: FakeCodec, data: bytes, max_record_bytes: int = 10_000) -> RecordRejected:
    with pytest.raises(RecordRejected) as refused:
        decoder(codec, max_record_bytes).decode(data)
    assert refused.value.cause in CAUSES
    return refused.value


def test_a_good_record_decodes_with_the_schema_topic() -> None:
    codec = FakeCodec()
    record = decoder(codec).decode(body())
    assert record["privacy_mode"] is False
    assert codec.calls == ["telemetry.suggestions"]


def test_oversized_records_are_refused_before_decoding() -> None:
    codec = FakeCodec()
    refused = rejection(codec, body(), max_record_bytes=10)
    assert refused.cause == "oversized" and refused.record is None
    assert codec.calls == []


@pytest.mark.parametrize("cause", ["bad_magic", "truncated", "unknown_schema", "schema_mismatch"])
def test_the_codecs_causes_pass_through(cause: str) -> None:
    assert rejection(FakeCodec(DecodeError(cause, "why")), body()).cause == cause


def test_privacy_mode_with_code_text_is_an_invalid_value_that_keeps_the_record() -> None:
    refused = rejection(FakeCodec(), body(privacy_mode=True, suggestion_text="secret()"))
    assert refused.cause == "invalid_value"
    assert "privacy_mode" in str(refused) and "secret()" not in str(refused)
    assert refused.record is not None and refused.record["privacy_mode"] is True
    assert decoder(FakeCodec()).decode(body(privacy_mode=True, suggestion_text=None))


@pytest.mark.parametrize("propensity", [0.0, 1.5, -0.1, math.nan])
def test_a_propensity_outside_0_1_is_an_invalid_value(propensity: float) -> None:
    refused = rejection(FakeCodec(), body(propensity=propensity))
    assert refused.cause == "invalid_value" and "propensity" in str(refused)


def test_rules_apply_only_to_schemas_with_their_fields() -> None:
    assert len(RecordValidator(SUGGESTION_FIELDS).rules) == 2
    pointer = RecordValidator(("event_id", "traffic_fraction"))
    assert len(pointer.rules) == 1
    assert pointer.problem({"traffic_fraction": 0.0}) is None
    assert "traffic_fraction" in (pointer.problem({"traffic_fraction": 1.01}) or "")
    assert RecordValidator(("event_id",)).rules == ()
