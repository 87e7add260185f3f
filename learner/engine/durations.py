"""Training durations in Composer-style units, and the progress they are measured against.

A `Duration` is a budget or an interval: ``'1ep'`` (epochs), ``'500ba'`` (optimizer steps),
``'20000sp'`` (samples), ``'2e6tok'`` (tokens, i.e. loss rows), ``'90s'``, ``'10m'``, ``'1.5h'``
(wall-clock time). `Progress` is where a training run stands; ``progress.reached(duration)`` says
whether a budget is spent, and ``progress.since(earlier).reached(interval)`` whether an interval
has passed (the checkpoint cadence).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from dataclasses import dataclass

from learner.errors import DurationError


class Unit(enum.StrEnum):
    """The accepted units; the value is the suffix in a duration string."""

    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    TOKEN = "tok"  # noqa: S105 (a unit suffix, not a password)
    SECOND = "s"
    MINUTE = "m"
    HOUR = "h"

    @property
    def is_time(self) -> bool:
        """True for the wall-clock units (s, m, h)."""
        return self in _SECONDS_PER_UNIT


_SECONDS_PER_UNIT = {Unit.SECOND: 1.0, Unit.MINUTE: 60.0, Unit.HOUR: 3600.0}
_UNITS_HELP = "ep (epochs), ba (batches), sp (samples), tok (tokens), s, m, h (wall time)"
# A plain or scientific number, then a unit. `[eE]` needs digits after it, so '1ep' is 1 + 'ep'.
_DURATION_RE = re.compile(
    r"^\s*(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>ep|ba|sp|tok|s|m|h)\s*$"
)


@dataclass(frozen=True)
class Duration:
    """A positive amount in one unit. Counts (ep, ba, sp, tok) are whole numbers.

    Build one with `Duration.parse('500ba')` or directly, e.g. ``Duration(500, Unit.BATCH)``.
    """

    value: float
    unit: Unit

    def __post_init__(self) -> None:
        if not isinstance(self.unit, Unit):
            raise DurationError(f"unit {self.unit!r} is not a Unit; use one of {_UNITS_HELP}")
        if not math.isfinite(self.value) or self.value <= 0:
            raise DurationError(f"duration {self.value}{self.unit} must be a positive number")
        if not self.unit.is_time and self.value != int(self.value):
            raise DurationError(
                f"duration {self.value}{self.unit} counts whole {self.unit.name.lower()}s; "
                "give an integer (e.g. '2ep', '2e6tok')"
            )

    @classmethod
    def parse(cls, text: str | Duration) -> Duration:
        """Parses ``'<number><unit>'``; a Duration passes through unchanged.

        Raises DurationError naming the accepted units when the text does not parse.
        """
        if isinstance(text, Duration):
            return text
        match = _DURATION_RE.match(text) if isinstance(text, str) else None
        if match is None:
            raise DurationError(
                f"cannot parse duration {text!r}: write a number followed by one of "
                f"{_UNITS_HELP}, e.g. '1ep', '500ba', '2e6tok', '1.5h'"
            )
        return cls(float(match["number"]), Unit(match["unit"]))

    @property
    def seconds(self) -> float:
        """The duration in seconds; only for the time units."""
        if not self.unit.is_time:
            raise DurationError(f"{self} is not a wall-clock duration; it has no seconds")
        return self.value * _SECONDS_PER_UNIT[self.unit]

    def __str__(self) -> str:
        number = int(self.value) if self.value == int(self.value) else self.value
        return f"{number}{self.unit.value}"


@dataclass(frozen=True)
class Progress:
    """Where a training run stands. All counts are global (summed over ranks).

    ``samples_in_epoch`` is the resume position inside the current epoch (global samples
    consumed since the epoch began); ``epochs`` counts completed epochs.
    """

    epochs: int = 0
    batches: int = 0
    samples: int = 0
    tokens: int = 0
    elapsed_s: float = 0.0
    samples_in_epoch: int = 0

    def reached(self, duration: Duration) -> bool:
        """True once this progress is at or past ``duration``."""
        if duration.unit.is_time:
            return self.elapsed_s >= duration.seconds
        count = {
            Unit.EPOCH: self.epochs,
            Unit.BATCH: self.batches,
            Unit.SAMPLE: self.samples,
            Unit.TOKEN: self.tokens,
        }[duration.unit]
        return count >= duration.value

    def since(self, earlier: Progress) -> Progress:
        """The progress made after ``earlier`` (for intervals such as the checkpoint cadence)."""
        return Progress(
            epochs=self.epochs - earlier.epochs,
            batches=self.batches - earlier.batches,
            samples=self.samples - earlier.samples,
            tokens=self.tokens - earlier.tokens,
            elapsed_s=self.elapsed_s - earlier.elapsed_s,
        )

    def after_step(self, samples: int, tokens: int, elapsed_s: float) -> Progress:
        """The progress after one optimizer step of ``samples`` samples and ``tokens`` rows."""
        return dataclasses.replace(
            self,
            batches=self.batches + 1,
            samples=self.samples + samples,
            tokens=self.tokens + tokens,
            elapsed_s=elapsed_s,
            samples_in_epoch=self.samples_in_epoch + samples,
        )

    def after_epoch(self) -> Progress:
        """The progress once the data of the current epoch is exhausted."""
        return dataclasses.replace(self, epochs=self.epochs + 1, samples_in_epoch=0)
