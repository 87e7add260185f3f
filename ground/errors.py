"""Root of every error Flywheel raises on purpose."""


class FlywheelError(Exception):
    """Base class: its message says what was wrong and how to fix it."""


class StorageError(FlywheelError):
    """A storage URI or its S3 settings are malformed or unreadable; the message names the fix."""
