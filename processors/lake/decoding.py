"""Bytes of a topic -> a decoded, validated record, or the reason it is a dead letter.

The codec (`streams.serde.AvroCodec`) reads the Confluent wire format and names the cause of a
failure; this adds the two checks the lake needs around it: a size limit before decoding and the
value rules after it.
"""

from __future__ import annotations

from typing import Any

from contracts.errors import RecordRejected
from processors.lake.validation import RecordValidator
from streams.errors import DecodeError
from streams.serde import Decoder

# What a dead letter's `flywheel.cause` header can say.
CAUSES = (
    "bad_magic",
    "truncated",
    "unknown_schema",
    "schema_mismatch",
    "invalid_body",
    "oversized",
    "invalid_value",
)
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024


class RecordDecoder:
    """Decodes and validates the records of one topic.

    `schema_topic` is the topic whose registered value schema the records carry: the topic
    itself for the platform's topics, a contract topic for a copy of one (tests, mirrors).
    """

    def __init__(
        self,
        codec: Decoder,
        schema_topic: str,
        validator: RecordValidator,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self._codec = codec
        self._schema_topic = schema_topic
        self._validator = validator
        self._max_record_bytes = max_record_bytes

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in `data`; RecordRejected with its cause (one of CAUSES) otherwise.

        A record larger than `max_record_bytes` is refused before any decoding. Errors that are
        not the record's fault (the registry is unreachable) propagate unchanged.
        """
        if len(data) > self._max_record_bytes:
            raise RecordRejected(
                "oversized", f"{len(data)} bytes is over the {self._max_record_bytes}-byte limit"
            )
        try:
            record = self._codec.decode(self._schema_topic, data)
        except DecodeError as exc:
            raise RecordRejected(exc.cause, str(exc)) from None
        problem = self._validator.problem(record)
        if problem is not None:
            raise RecordRejected("invalid_value", problem, record)
        return record
