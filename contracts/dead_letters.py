"""Dead letters: a record the lake refuses, as the record to produce to `dlq.<stage>`.

The value is the original bytes and the key the original key, so a fixed consumer can replay
it; headers say why and where it came from:

| header               | value                                                          |
|----------------------|----------------------------------------------------------------|
| `flywheel.error`     | what was wrong (UTF-8 text)                                    |
| `flywheel.cause`     | bad_magic, truncated, unknown_schema, schema_mismatch,         |
|                      | invalid_body, oversized or invalid_value                       |
| `flywheel.stage`     | the stage that refused it (`sink`)                             |
| `flywheel.topic`     | original topic                                                 |
| `flywheel.partition` | original partition (decimal)                                   |
| `flywheel.offset`    | original offset (decimal)                                      |
| `flywheel.body-withheld` | only when the value is empty on purpose: `privacy` or `oversized` |
| `flywheel.body-bytes`    | with it: the size of the original value                       |

Privacy rule: a dead letter never carries code text that could come from a privacy-mode event.
For topics whose schema has a `suggestion_text` field, the body is withheld unless the record
decoded, its `privacy_mode` is false and its text has no secret left to redact (what the SDK
sends); the error message is then replaced by a fixed one, since decoder messages may quote
bytes of the body. A withheld body is still in the source topic (until its retention) at the
topic/partition/offset the headers name. Oversized records are never copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts.errors import RecordRejected
from streams.redaction import redact_secrets

CODE_TEXT_FIELD = "suggestion_text"
MAX_ERROR_CHARS = 1000
_FIXED_MESSAGES = {
    "bad_magic": "the value does not start with the wire format's magic byte 0",
    "truncated": "the value ends before the record does",
    "unknown_schema": "the value names a schema id the registry does not have",
    "schema_mismatch": "the value's schema cannot be read as the topic's schema",
    "invalid_body": "the value does not decode with its schema",
    "oversized": "the value is over the sink's size limit",
    "invalid_value": "a field breaks a value rule of the schema",
    "late": "the event is later than the allowed lateness",
    "orphan": "no offer for the event's suggestion arrived within the allowed lateness",
}


@dataclass(frozen=True)
class DeadLetter:
    """One record for the DLQ topic."""

    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]

    def header(self, name: str) -> str | None:
        """A header's value as text (tests and tools), None when absent."""
        for key, value in self.headers:
            if key == name:
                return value.decode()
        return None


@dataclass(frozen=True)
class Origin:
    """Where a refused record was read."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def dead_letter(
    rejected: RecordRejected, origin: Origin, *, stage: str, carries_code_text: bool
) -> DeadLetter:
    """The DLQ record for `rejected`, read at `origin`; `carries_code_text` is True for topics
    whose schema has a code-text field (see the privacy rule above)."""
    withheld = withhold_reason(rejected, carries_code_text)
    message = str(rejected) if withheld != "privacy" else _FIXED_MESSAGES[rejected.cause]
    headers = [
        ("flywheel.error", message[:MAX_ERROR_CHARS].encode()),
        ("flywheel.cause", rejected.cause.encode()),
        ("flywheel.stage", stage.encode()),
        ("flywheel.topic", origin.topic.encode()),
        ("flywheel.partition", str(origin.partition).encode()),
        ("flywheel.offset", str(origin.offset).encode()),
    ]
    if withheld is None:
        return DeadLetter(origin.key, origin.value, headers)
    headers.append(("flywheel.body-withheld", withheld.encode()))
    headers.append(("flywheel.body-bytes", str(len(origin.value)).encode()))
    return DeadLetter(origin.key, b"", headers)


def withhold_reason(rejected: RecordRejected, carries_code_text: bool) -> str | None:
    """Why the original bytes must not be copied (`oversized`, `privacy`), or None."""
    if rejected.cause == "oversized":
        return "oversized"
    if carries_code_text and not _proven_safe(rejected.record):
        return "privacy"
    return None


def _proven_safe(record: dict[str, Any] | None) -> bool:
    """True only for a decoded non-privacy-mode record whose code text has no secret left."""
    if record is None or record.get("privacy_mode") is not False:
        return False
    text = record.get(CODE_TEXT_FIELD)
    return text is None or (isinstance(text, str) and not redact_secrets(text).findings)
