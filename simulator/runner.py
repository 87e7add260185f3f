"""Drive a :class:`Fleet` into any sink, as fast as possible or paced to a request rate.

The sink is anything with ``send(event)`` (the SDK's ``TelemetryClient.send``, a list's
``append`` wrapped in a class, a file writer). Concurrency is the fleet's own:
``sessions.concurrent_sessions`` simulated clients interleaved in event time inside one thread
(deterministic, and the GIL would serialise threads anyway); the runner adds wall-clock pacing.
Time is read through the injected ``clock`` and ``sleep``, so pacing is testable without waiting.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from schemas.events import Event
from simulator.errors import SimulatorError
from simulator.fleet import Fleet
from simulator.ground_truth import GroundTruthSummary

PROGRESS_INTERVAL_S = 1.0
_PACED_BATCH_S = 0.05  # a paced run sends ~20 batches a second, so it stays smooth


class EventSink(Protocol):
    """Where simulated events go."""

    def send(self, event: Event) -> None:
        """Accept one event; may raise to abort the run."""
        ...


@dataclass(frozen=True)
class RunReport:
    """What a run (or the run so far) produced."""

    requests: int
    events: int
    events_by_type: Mapping[str, int]  # schema name → count
    elapsed_s: float  # wall clock
    ground_truth: GroundTruthSummary  # the fleet's totals, over all its runs so far

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _check(n_requests: int | None, duration_s: float | None, rate_per_s: float | None) -> None:
    if n_requests is None and duration_s is None:
        raise SimulatorError(
            "run_fleet needs n_requests or duration_s (or both) to know when to stop."
        )
    if n_requests is not None and n_requests < 0:
        raise SimulatorError(f"n_requests={n_requests} must be ≥ 0.")
    if duration_s is not None and duration_s < 0:
        raise SimulatorError(f"duration_s={duration_s} must be ≥ 0.")
    if rate_per_s is not None and rate_per_s <= 0:
        raise SimulatorError(f"rate_per_s={rate_per_s} must be > 0; omit it to run unpaced.")


def run_fleet(
    fleet: Fleet,
    sink: EventSink,
    n_requests: int | None = None,
    duration_s: float | None = None,
    rate_per_s: float | None = None,
    progress: Callable[[RunReport], None] | None = None,
    *,
    flush: bool = True,
    batch_size: int = 1024,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunReport:
    """Send the events of ``fleet``'s next requests to ``sink`` and report what was sent.

    Stops after ``n_requests`` requests or ``duration_s`` wall-clock seconds, whichever comes
    first (at least one is required). With ``rate_per_s`` the run never gets ahead of that many
    requests per second since its start (it sleeps before each batch until the batch is due);
    without it, it runs as fast as the fleet and sink allow. ``progress`` is called with the
    report so far about once a second. ``flush`` (default) sends the events still pending in the
    simulated future at the end; pass False when another run of the same fleet follows, so the
    stream stays in event-time order across runs. Raises :class:`SimulatorError` for invalid
    arguments; exceptions from ``sink.send`` propagate.
    """
    _check(n_requests, duration_s, rate_per_s)
    if rate_per_s is not None:
        batch_size = max(1, min(batch_size, int(rate_per_s * _PACED_BATCH_S)))
    tally = _Tally(fleet, sink, clock)
    end = None if duration_s is None else tally.start + duration_s
    last_progress = tally.start
    while n_requests is None or tally.requests < n_requests:
        now = clock()
        if end is not None and now >= end:
            break
        size = batch_size if n_requests is None else min(batch_size, n_requests - tally.requests)
        if rate_per_s is not None:
            due = tally.start + (tally.requests + size) / rate_per_s
            if due > now:
                sleep((due if end is None else min(due, end)) - now)
                continue  # re-read the clock: the duration may have run out meanwhile
        tally.send_all(fleet.step(size))
        tally.requests += size
        if progress is not None and clock() - last_progress >= PROGRESS_INTERVAL_S:
            last_progress = clock()
            progress(tally.report())
    if flush:
        tally.send_all(fleet.flush())
    return tally.report()


class _Tally:
    """Counts what a run sent, and sends it."""

    def __init__(self, fleet: Fleet, sink: EventSink, clock: Callable[[], float]) -> None:
        self._fleet, self._sink, self._clock = fleet, sink, clock
        self.start = clock()
        self.requests = 0
        self._counts: Counter[str] = Counter()

    def send_all(self, events: list[Event]) -> None:
        send, counts = self._sink.send, self._counts
        for event in events:
            send(event)
            counts[event.SCHEMA_NAME] += 1

    def report(self) -> RunReport:
        return RunReport(
            requests=self.requests,
            events=sum(self._counts.values()),
            events_by_type=MappingProxyType(dict(self._counts)),
            elapsed_s=self._clock() - self.start,
            ground_truth=self._fleet.ground_truth.summary(),
        )
