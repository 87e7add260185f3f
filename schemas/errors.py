"""Errors the schemas package raises on purpose."""

from ground.errors import FlywheelError


class SchemaError(FlywheelError):
    """A schema or an event is missing, malformed, or does not fit its contract.

    The message names the schema, field or file at fault and what to change.
    """
