"""Errors the joiner's faust adapter raises on purpose; each message names the fix."""

from ground.errors import FlywheelError


class JoinerError(FlywheelError):
    """The worker cannot keep its guarantee (a lost transaction, a failed send): it stops, and a
    restarted worker resumes from the last committed transaction."""
