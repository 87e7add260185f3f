"""Errors of the learner. Each names what was wrong and how to fix it."""

from __future__ import annotations

from flywheel.errors import FlywheelError


class LearnerError(FlywheelError):
    """Base of every learner error (bad duration, missing checkpoint, corrupt artifact, …)."""
