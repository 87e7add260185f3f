"""The soak benchmark's pure parts: the phase schedule and the summary of its samples.

Nothing here touches Kafka, processes or files, so it is unit-tested on made-up series
(tests/bench/test_soak.py). Times are seconds since the load started; lags are messages a
consumer group has yet to commit; memory is RSS in MiB.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from ground.errors import FlywheelError

BASE, BURST, RECOVERY = "base", "burst", "recovery"


class SoakError(FlywheelError):
    """A soak option or series that cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Phase:
    """``rate_per_s`` simulated requests per second from ``start_s`` for ``duration_s``."""

    name: str
    start_s: float
    duration_s: float
    rate_per_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


def schedule(
    duration_s: float,
    rate_per_s: float,
    burst_factor: float = 2.0,
    warmup_s: float | None = None,
    burst_s: float | None = None,
) -> list[Phase]:
    """Warm-up at the base rate, a burst at ``burst_factor`` x base, then base again to the end.

    Defaults: warm-up and burst each take a sixth of ``duration_s``, so the recovery is the last
    two thirds of the run (the window the memory slope is fitted on). Raises :class:`SoakError`
    when a value is not positive or the warm-up and burst leave no time to recover.
    """
    for name, value in (("duration", duration_s), ("rate", rate_per_s)):
        if value <= 0:
            raise SoakError(f"--{name} must be > 0, got {value}")
    if burst_factor < 1:
        raise SoakError(f"--burst-factor must be ≥ 1, got {burst_factor}")
    warm = duration_s / 6 if warmup_s is None else warmup_s
    burst = duration_s / 6 if burst_s is None else burst_s
    if warm <= 0 or burst <= 0:
        raise SoakError(f"--warmup-s and --burst-s must be > 0, got {warm} and {burst}")
    recovery = duration_s - warm - burst
    if recovery <= 0:
        raise SoakError(
            f"warm-up {warm:g} s + burst {burst:g} s leave no recovery in --duration "
            f"{duration_s:g} s; lengthen --duration or shorten --warmup-s/--burst-s"
        )
    return [
        Phase(BASE, 0.0, warm, rate_per_s),
        Phase(BURST, warm, burst, rate_per_s * burst_factor),
        Phase(RECOVERY, warm + burst, recovery, rate_per_s),
    ]


def parse_phases(text: str) -> list[tuple[str, float, float]]:
    """``[[name, duration_s, rate_per_s], ...]`` from JSON; raises ValueError when malformed."""
    raw = json.loads(text)  # the soak passes its schedule to the load process this way
    phases = [(str(name), float(duration), float(rate)) for name, duration, rate in raw]
    if not phases or any(d <= 0 or r <= 0 for _, d, r in phases):
        raise ValueError(f"--phases needs [name, duration_s > 0, rate > 0] triples, got {text}")
    return phases


def phase_at(phases: Sequence[Phase], t: float) -> str:
    """Name of the phase running at ``t`` (the first before 0, the last after the end)."""
    for phase in phases:
        if t < phase.end_s:
            return phase.name
    return phases[-1].name


def slope_per_min(ts: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` over ``ts`` (seconds), per minute; 0 with < 2 distinct ts."""
    n = len(ts)
    if n != len(ys):
        raise SoakError(f"{n} times but {len(ys)} values")
    if n < 2:
        return 0.0
    mean_t, mean_y = sum(ts) / n, sum(ys) / n
    var = sum((t - mean_t) ** 2 for t in ts)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (y - mean_y) for t, y in zip(ts, ys, strict=True))
    return cov / var * 60.0


def drain_time(
    ts: Sequence[float], lags: Sequence[int | None], burst_end_s: float, level: float
) -> float | None:
    """Seconds after ``burst_end_s`` until the lag first reads ≤ ``level`` (None: never).

    Unknown lags (None: the probe timed out) are skipped, never counted as drained.
    """
    for t, lag in zip(ts, lags, strict=True):
        if t >= burst_end_s and lag is not None and lag <= level:
            return t - burst_end_s
    return None


@dataclass(frozen=True)
class LagSummary:
    """One consumer group's lag over the run (messages, summed over its topics)."""

    base_max: int  # the warm-up after the settle time: the base-level lag
    burst_max: int
    recovery_max: int  # the recovery after the lag drained
    recovery_median: float
    level: float  # base-level lag with the tolerance: what "drained" means
    drain_s: float | None  # after the burst ended; None: never drained
    warmup_slope_per_min: float  # lag growth at the base rate: > 0 means over capacity
    recovery_slope_per_min: float

    @property
    def bounded(self) -> bool:
        """The base rate builds no backlog: neither in the warm-up nor after the drain does the
        lag grow by more than its base level a minute, and after the drain its median stays at
        the base level (the median: commits come in batches, so single samples spike)."""
        growing = max(self.warmup_slope_per_min, self.recovery_slope_per_min) > self.level
        settled = self.drain_s is not None and self.recovery_median <= self.level
        return settled and not growing


def _known(values: Sequence[tuple[float, int | None]]) -> list[int]:
    return [v for _, v in values if v is not None]


def summarize_lag(
    ts: Sequence[float],
    lags: Sequence[int | None],
    phases: Sequence[Phase],
    settle_s: float,
    tolerance: float = 0.25,
    floor: int = 100,
) -> LagSummary:
    """Summarise one group's lag series sampled at ``ts`` under ``phases`` (see :func:`schedule`).

    The base level is the largest lag of the warm-up after ``settle_s`` (groups join, caches
    warm), times ``1 + tolerance``, and at least ``floor`` messages (commits come in batches, so
    a healthy consumer's lag swings by a few batches). Raises :class:`SoakError` when the
    warm-up has no known sample after the settle time.
    """
    if len(ts) != len(lags):
        raise SoakError(f"{len(ts)} times but {len(lags)} lags")
    by_phase: dict[str, list[tuple[float, int | None]]] = {p.name: [] for p in phases}
    for t, lag in zip(ts, lags, strict=True):
        by_phase[phase_at(phases, t)].append((t, lag))
    warm = [(t, v) for t, v in by_phase[BASE] if t >= settle_s and v is not None]
    if not warm:
        raise SoakError(
            f"no lag sample in the warm-up after its first {settle_s:g} s; lengthen "
            "--warmup-s or shorten --settle-s"
        )
    base_max = max(v for _, v in warm)
    level = max(float(floor), base_max * (1 + tolerance))
    burst = next(p for p in phases if p.name == BURST)
    drain = drain_time(ts, lags, burst.end_s, level)
    after = [
        (t, v)
        for t, v in by_phase[RECOVERY]
        if drain is not None and t >= burst.end_s + drain and v is not None
    ]
    return LagSummary(
        base_max=base_max,
        burst_max=max(_known(by_phase[BURST]), default=0),
        recovery_max=max(_known(after), default=0),
        recovery_median=float(median(_known(after))) if after else 0.0,
        level=level,
        drain_s=drain,
        warmup_slope_per_min=_slope(warm),
        recovery_slope_per_min=_slope(after),
    )


def _slope(series: Sequence[tuple[float, int | None]]) -> float:
    known = [(t, float(v)) for t, v in series if v is not None]
    return slope_per_min([t for t, _ in known], [v for _, v in known])


@dataclass(frozen=True)
class MemorySummary:
    """One worker's RSS over the run (MiB)."""

    start_mib: float
    end_mib: float
    peak_mib: float
    slope_mib_per_min: float  # fitted over the last two thirds of the run

    def flat(self, max_slope_mib_per_min: float) -> bool:
        """No leak: the RSS grows by at most this much a minute (memory given back after the
        burst, a falling slope, is not a leak)."""
        return self.slope_mib_per_min <= max_slope_mib_per_min


def summarize_memory(
    ts: Sequence[float], rss_mib: Sequence[float | None], duration_s: float
) -> MemorySummary:
    """Start, end, peak and the slope over ``t ≥ duration_s / 3`` of one worker's RSS series.

    Missing samples (None: the process was gone) are skipped. Raises :class:`SoakError` when
    no sample is known.
    """
    known = [(t, m) for t, m in zip(ts, rss_mib, strict=True) if m is not None]
    if not known:
        raise SoakError("no memory sample was taken; is the worker running?")
    tail = [(t, m) for t, m in known if t >= duration_s / 3] or known
    return MemorySummary(
        start_mib=known[0][1],
        end_mib=known[-1][1],
        peak_mib=max(m for _, m in known),
        slope_mib_per_min=slope_per_min([t for t, _ in tail], [m for _, m in tail]),
    )
