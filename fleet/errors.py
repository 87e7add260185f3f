"""Errors the inference fleet raises on purpose; each message says what was wrong and the fix."""

from ground.errors import FlywheelError


class FleetError(FlywheelError):
    """Base class of the inference fleet's errors."""


class ServingError(FleetError):
    """The subscriber cannot follow the channels (topic missing, broker unreachable)."""


class DecideRequestError(FleetError):
    """A decide request the replica cannot answer; ``status`` is the HTTP status to send."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
