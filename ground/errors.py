"""Root of every error Flywheel raises on purpose."""


class FlywheelError(Exception):
    """Base class: its message says what was wrong and how to fix it."""
