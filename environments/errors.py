"""Errors the environments raise on purpose; each message says what was wrong and the fix.

Nothing a *completion* does raises: the sandbox scores it as a failure with a reason."""

from ground.errors import FlywheelError


class TaskEnvironmentError(FlywheelError):
    """An unknown environment, or a task whose spec the environment cannot read."""


class SandboxUnavailableError(FlywheelError):
    """This machine cannot isolate model-written code, and the operator did not say it is
    trusted: nothing that runs such code starts (the message names what is missing)."""
