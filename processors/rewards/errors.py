"""Errors the reward stage raises on purpose; each message says what was wrong and how to fix it."""

from ground.errors import FlywheelError


class RewardError(FlywheelError):
    """A reward could not be attributed or computed: an unknown reward function, an event that
    belongs to no suggestion, an inconsistent rollout group, a bad window or policy setting."""
