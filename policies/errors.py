"""Errors the policy definitions raise on purpose; each message says what was wrong and the fix."""

from ground.errors import FlywheelError


class PolicyError(FlywheelError):
    """A policy is misconfigured or its inputs do not fit it."""
