"""Counters a running joiner keeps for its status line."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class JoinerStats:
    """What the joiner did since it started; `line()` is the status line `flywheel process` prints.

    `lag` is the sum over assigned source partitions of (high watermark - next offset), as last
    seen when an event of that partition was processed.
    """

    events: int = 0
    rewards: int = 0
    late: int = 0
    dead_letters: int = 0
    expired: int = 0  # orphans (no offer) dropped from the state at their expiry
    expired_groups: int = 0  # emitted rollout groups' entries dropped after the horizon
    refetches: int = 0  # seeks back to offsets the consumer skipped
    holes: int = 0  # skipped offsets that never arrived (no records there), accepted
    duplicates: int = 0  # re-sent events of suggestions already attributed, dropped
    groups: int = 0
    lag_by_partition: dict[str, int] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    last_input_at: float = field(default_factory=time.monotonic)
    _events_at_last_line: int = 0
    _last_line_at: float = field(default_factory=time.monotonic)

    def saw_input(self) -> None:
        self.events += 1
        self.last_input_at = time.monotonic()

    @property
    def lag(self) -> int:
        return sum(self.lag_by_partition.values())

    def idle_s(self) -> float:
        """Seconds since the last input event (or since start when there was none)."""
        return time.monotonic() - self.last_input_at

    def line(self) -> str:
        """`events/s` is measured since the previous call."""
        now = time.monotonic()
        rate = (self.events - self._events_at_last_line) / max(now - self._last_line_at, 1e-9)
        self._events_at_last_line, self._last_line_at = self.events, now
        return (
            f"process: {self.events:,} events ({rate:,.0f}/s), {self.rewards:,} rewards, "
            f"{self.groups:,} groups, {self.late:,} late, {self.dead_letters:,} dead letters, "
            f"{self.expired:,} expired, lag {self.lag:,}"
        )
