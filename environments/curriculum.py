"""The training task mix across difficulty levels, moved by measured pass rates.

A level is *unlocked* when the level below it passes at least ``unlock`` of its recent trials
(level 1 always is): single-file work first, multi-file work once single files are mostly
solved. Among unlocked levels, a level's weight is its learning signal ``p (1 - p)`` (a group of
trials all passing or all failing carries no GRPO advantage, so levels near 50% teach the most),
never below ``floor`` so no unlocked level is starved and its pass rate stays measured. Pass
rates are over the last ``window`` trials of each level, with one pseudo-trial at ``prior`` so
an unmeasured level has a rate.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from environments.errors import TaskEnvironmentError


@dataclass
class Curriculum:
    """Levels in increasing difficulty; :meth:`record` each trial, :meth:`draw` the next level."""

    levels: Sequence[int] = (1, 2, 3)
    unlock: float = 0.3
    floor: float = 0.05
    window: int = 256
    prior: float = 0.5
    _results: dict[int, deque[bool]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if not self.levels:
            raise TaskEnvironmentError("a curriculum needs at least one level")
        self._results = {level: deque(maxlen=self.window) for level in self.levels}

    def record(self, level: int, passed: bool) -> None:
        """One trial of ``level`` (other levels are ignored: tasks from elsewhere)."""
        if level in self._results:
            self._results[level].append(passed)

    def pass_rate(self, level: int) -> float:
        results = self._results[level]
        return (sum(results) + self.prior) / (len(results) + 1)

    def unlocked(self) -> list[int]:
        """Level 1 and each next level whose predecessor passes ``unlock`` of its trials."""
        out = [self.levels[0]]
        for lower, level in zip(self.levels, self.levels[1:], strict=False):
            if not self._results[lower] or self.pass_rate(lower) < self.unlock:
                break
            out.append(level)
        return out

    def weights(self) -> Mapping[int, float]:
        """Level → share of the next draws (0 for locked levels); the shares sum to 1."""
        open_levels = self.unlocked()
        raw = {level: max(self.floor, self.pass_rate(level) * (1 - self.pass_rate(level)))
               for level in open_levels}  # fmt: skip
        total = sum(raw.values())
        return {level: raw.get(level, 0.0) / total for level in self.levels}

    def draw(self, rng: random.Random) -> int:
        weights = self.weights()
        return rng.choices(list(weights), weights=list(weights.values()))[0]

    def summary(self) -> str:
        """``L1 62% (w .41) L2 30% (w .59) L3 locked`` for status lines."""
        weights = self.weights()
        parts = []
        for level in self.levels:
            if weights[level] == 0:
                parts.append(f"L{level} locked")
            else:
                parts.append(f"L{level} {self.pass_rate(level):.0%} (w {weights[level]:.2f})")
        return " ".join(parts)
