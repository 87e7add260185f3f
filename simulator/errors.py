"""Errors the simulator raises on purpose."""

from ground.errors import FlywheelError


class SimulatorError(FlywheelError):
    """A simulator configuration, policy or run request is invalid.

    The message names the key, policy or argument at fault and what to change.
    """
