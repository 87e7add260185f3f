"""Errors of the code embedder; each message says what was wrong and how to fix it."""

from ground.errors import FlywheelError


class EmbeddingError(FlywheelError):
    """An embedder checkpoint cannot be loaded, or its inputs do not fit it."""
