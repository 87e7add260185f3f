"""Errors the model registry raises on purpose; each message says what was wrong and the fix."""

from ground.errors import FlywheelError


class ModelRegistryError(FlywheelError):
    """The registry cannot do what was asked (unknown version, nothing to roll back, Kafka)."""


class ArtifactError(ModelRegistryError):
    """An artifact is missing, incomplete, tampered with, or cannot be published."""


class CanaryError(ModelRegistryError):
    """A canary setting that cannot decide anything (confidence or min_requests out of range)."""
