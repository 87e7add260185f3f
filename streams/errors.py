"""Errors of the Kafka-facing layer: the local stack and topics."""

from flywheel.errors import FlywheelError


class StackError(FlywheelError):
    """The local stack cannot be started, stopped or reached; the message names the fix."""


class TopicError(FlywheelError):
    """Topics cannot be created, or exist with settings that drifted from their declaration."""


class KafkaSecurityError(FlywheelError):
    """The FLYWHEEL_KAFKA_* security settings are unsupported or inconsistent; names the fix."""
