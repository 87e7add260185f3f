"""Errors the shared contracts raise on purpose; each message says what was wrong and how to
fix it."""

from typing import Any

from ground.errors import FlywheelError


class ContractError(FlywheelError):
    """Base class of the shared contracts' errors."""


class UnsupportedSchemaError(ContractError):
    """An Avro schema uses a construct the lake cannot store as a Parquet column."""


class LakeLayoutError(ContractError):
    """A path in the lake does not follow DESIGN §6, or a file would overwrite another."""


class RecordRejected(ContractError):
    """A record a stage refuses: it becomes a dead letter and processing goes on.

    `cause` is one of `processors.lake.decoding.CAUSES`; `record` is the decoded record when
    decoding got that far (a value rule failed), else None.
    """

    def __init__(self, cause: str, message: str, record: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.record = record
