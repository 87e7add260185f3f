"""Errors of the composition root (settings, CLI, services' plumbing, the demo); each message
says what was wrong and the fix. The CLI turns every FlywheelError into a one-line message."""

from ground.errors import FlywheelError


class WorkerDied(FlywheelError):
    """A worker process exited while the demo still needed it."""


class DoctorError(FlywheelError):
    """A check name that does not exist."""


class ListenError(FlywheelError):
    """The service cannot listen where it was asked to."""


class LoggingConfigError(FlywheelError):
    """An unknown log format or level."""


class MetricsError(FlywheelError):
    """The metrics endpoint cannot start (port taken, bad host)."""


class SettingsError(FlywheelError):
    """A FLYWHEEL_* variable is malformed or inconsistent."""
