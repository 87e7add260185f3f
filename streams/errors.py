"""Errors of the Kafka-facing layer: the local stack, topics, the codec, the SDK and its spool."""

from ground.errors import FlywheelError


class StackError(FlywheelError):
    """The local stack cannot be started, stopped or reached; the message names the fix."""


class TopicError(FlywheelError):
    """Topics cannot be created, or exist with settings that drifted from their declaration."""


class KafkaSecurityError(FlywheelError):
    """The FLYWHEEL_KAFKA_* security settings are unsupported or inconsistent; names the fix."""


class TopicIOError(FlywheelError):
    """A synchronous write was refused or unacknowledged, or a bounded read failed."""


class SchemaRegistryRequestError(FlywheelError):
    """The registry is unreachable or refused a schema; the message names the fix."""


class EventValidationError(FlywheelError):
    """An event does not match its schema; the message names the offending field(s)."""


class DecodeError(FlywheelError):
    """Bytes that are not a decodable record of the topic. `cause` is a stable short code:
    `bad_magic`, `truncated` (shorter than the header, or the body ends early),
    `unknown_schema`, `schema_mismatch` or `invalid_body`."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class PrivacyError(FlywheelError):
    """Privacy cannot be applied as configured (e.g. no pseudonymisation key); names the fix."""


class SpoolError(FlywheelError):
    """The spool directory is unusable or owned by another client."""
