"""Errors the lake sink raises on purpose; each message says what was wrong and how to fix it."""

from typing import Any

from ground.errors import FlywheelError


class LakeError(FlywheelError):
    """Base class of the lake sink's errors."""


class UnsupportedSchemaError(LakeError):
    """An Avro schema uses a construct the lake cannot store as a Parquet column."""


class LakeLayoutError(LakeError):
    """A path in the lake does not follow DESIGN §6, or a file would overwrite another."""


class DeadLetterError(LakeError):
    """Dead letters could not be delivered to the DLQ topic, so the offsets they cover are not
    made durable (no file is renamed, nothing is committed); the sink stops and a restart
    replays them."""


class SinkConfigError(LakeError):
    """The sink was configured inconsistently (limits, topics, schemas)."""


class RecordRejected(LakeError):
    """A record the lake refuses: it becomes a dead letter and processing goes on.

    `cause` is one of `decoding.CAUSES`; `record` is the decoded record when decoding got that
    far (a value rule failed), else None.
    """

    def __init__(self, cause: str, message: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.record = record


class ErasureError(LakeError):
    """An erasure or retention request that cannot be carried out as asked."""
