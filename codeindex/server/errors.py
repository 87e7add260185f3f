"""Errors of the codebase index server."""

from __future__ import annotations

from ground.errors import FlywheelError


class IndexServerError(FlywheelError):
    """Root of the index server's errors."""


class IndexRequestError(IndexServerError):
    """A request the server refuses; `status` is the HTTP status it is answered with and the
    message the client-facing reason (what was wrong, how to fix it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class EventLogError(IndexServerError):
    """The index's topics cannot be written or read (broker down, topic missing)."""
