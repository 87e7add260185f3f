"""Errors of the learner. Each names what was wrong and how to fix it."""

from __future__ import annotations

from ground.errors import FlywheelError


class LearnerError(FlywheelError):
    """Base of every learner error (bad duration, missing checkpoint, corrupt artifact, …)."""


class CheckpointError(LearnerError):
    """A checkpoint is missing, incomplete or unreadable."""


class DistributedError(LearnerError):
    """The launch environment or the requested device cannot be used."""


class DurationError(LearnerError):
    """A duration string or value that cannot be used (unknown unit, bad number)."""


class TrainingDataError(LearnerError):
    """The windows cannot be read as a training mix."""


class MicrobatchError(LearnerError):
    """A step cannot run even one sample at a time, or the task returned a bad loss."""


class TrainerConfigError(LearnerError):
    """A trainer setting that cannot work (batch not divisible, bad sizes, missing file)."""
