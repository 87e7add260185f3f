"""Dead letters of the joiner, in the lake sink's format (`contracts.dead_letters`).

Undecodable records go to `dlq.joiner` with the decoder's cause; events later than the allowed
lateness go to `dlq.late` with cause `late` and the reason as `flywheel.error`, and the events of
an expired orphan (no offer came) with cause `orphan`. Both carry
`flywheel.stage=joiner` and the original topic/partition/offset, key and (unless the privacy rule
withholds it) bytes.
"""

from __future__ import annotations

from typing import Any

from contracts.dead_letters import DeadLetter, Origin, dead_letter
from contracts.errors import RecordRejected
from schemas.catalog import parsed_schema
from streams.topics import TOPIC_VALUE_SCHEMAS

STAGE = "joiner"
LATE = "late"
ORPHAN = "orphan"  # an outcome, edit or test run whose offer never came (expired state)


def carries_code_text(platform_topic: str) -> bool:
    """True when the topic's schema has a code-text field (the privacy rule applies)."""
    schema = parsed_schema(TOPIC_VALUE_SCHEMAS[platform_topic])
    return any(f["name"] == "suggestion_text" for f in schema.get("fields", ()))


def rejected_dead_letter(
    cause: str, message: str, origin: Origin, platform_topic: str
) -> DeadLetter:
    """A record that does not decode (cause from `DecodeError.cause`) or convert."""
    return dead_letter(
        RecordRejected(cause, message),
        origin,
        stage=STAGE,
        carries_code_text=carries_code_text(platform_topic),
    )


def late_dead_letter(
    reason: str, record: dict[str, Any], origin: Origin, platform_topic: str
) -> DeadLetter:
    """An event later than the allowed lateness; `reason` says by how much."""
    return dead_letter(
        RecordRejected(LATE, reason, record),
        origin,
        stage=STAGE,
        carries_code_text=carries_code_text(platform_topic),
    )
