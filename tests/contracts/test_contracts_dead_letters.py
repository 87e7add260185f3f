"""Dead letters: headers, original bytes, and the privacy rule."""

from __future__ import annotations

import pytest

from contracts.dead_letters import DeadLetter, Origin, dead_letter, withhold_reason
from contracts.errors import RecordRejected

ORIGIN = Origin("telemetry.outcomes", 2, 1234, b"session-1", b"\x00\x00\x00\x00\x01body")
CODE = "def handler():\n    return compute()\n"


def letter(rejected: RecordRejected, *, code_text: bool, origin: Origin = ORIGIN) -> DeadLetter:
    return dead_letter(rejected, origin, stage="sink", carries_code_text=code_text)


def test_a_dead_letter_keeps_key_and_bytes_and_names_error_stage_and_origin() -> None:
    got = letter(RecordRejected("invalid_body", "3 trailing bytes"), code_text=False)
    assert (got.key, got.value) == (ORIGIN.key, ORIGIN.value)
    assert [name for name, _ in got.headers] == [
        "flywheel.error", "flywheel.cause", "flywheel.stage",
        "flywheel.topic", "flywheel.partition", "flywheel.offset",
    ]  # fmt: skip
    assert got.header("flywheel.error") == "3 trailing bytes"
    assert got.header("flywheel.cause") == "invalid_body"
    assert got.header("flywheel.stage") == "sink"
    assert got.header("flywheel.topic") == "telemetry.outcomes"
    assert (got.header("flywheel.partition"), got.header("flywheel.offset")) == ("2", "1234")
    assert got.header("flywheel.body-withheld") is None


def test_oversized_bodies_are_never_copied() -> None:
    got = letter(RecordRejected("oversized", "2000000 bytes is over"), code_text=False)
    assert got.value == b""
    assert got.header("flywheel.body-withheld") == "oversized"
    assert got.header("flywheel.body-bytes") == str(len(ORIGIN.value))


@pytest.mark.parametrize("cause", ["bad_magic", "truncated", "unknown_schema", "invalid_body"])
def test_undecodable_records_of_code_text_topics_carry_no_body_and_a_fixed_message(
    cause: str,
) -> None:
    origin = Origin("telemetry.suggestions", 0, 7, b"s", b"\x00junk " + CODE.encode())
    got = letter(RecordRejected(cause, f"EOFError({CODE!r})"), code_text=True, origin=origin)
    assert got.value == b""
    assert got.header("flywheel.body-withheld") == "privacy"
    assert CODE not in repr(got.headers) and "compute" not in repr(got.headers)
    assert got.header("flywheel.cause") == cause


def test_a_privacy_mode_record_that_fails_validation_carries_no_code_text() -> None:
    record = {"privacy_mode": True, "suggestion_text": CODE}
    rejected = RecordRejected("invalid_value", "privacy_mode is true but ...", record)
    got = letter(rejected, code_text=True)
    assert got.value == b"" and CODE not in repr(got.headers)
    assert withhold_reason(rejected, True) == "privacy"


def test_a_decoded_non_private_record_with_redacted_text_keeps_its_body() -> None:
    record = {"privacy_mode": False, "suggestion_text": CODE}
    rejected = RecordRejected("invalid_value", "propensity is 1.5, outside (0, 1]", record)
    got = letter(rejected, code_text=True)
    assert got.value == ORIGIN.value
    assert got.header("flywheel.error") == "propensity is 1.5, outside (0, 1]"


def test_text_with_a_secret_left_in_it_is_withheld() -> None:
    leaked = 'aws_key = "AKIAIOSFODNN7EXAMPLE"\n'
    record = {"privacy_mode": False, "suggestion_text": leaked}
    assert withhold_reason(RecordRejected("invalid_value", "x", record), True) == "privacy"


def test_long_messages_are_capped() -> None:
    got = letter(RecordRejected("invalid_body", "x" * 5000), code_text=False)
    assert len(got.header("flywheel.error") or "") == 1000
