"""Errors of the index client; each message says what went wrong and how to fix it."""

from ground.errors import FlywheelError


class IndexClientError(FlywheelError):
    """The index client could not sync or search: the server, the state or the workspace."""
