"""simulator.runner: stopping, pacing and progress, with a fake clock (no real sleeping)."""

from __future__ import annotations

import pytest

from schemas.events import Event, SuggestionOffered
from simulator import (
    Fleet,
    HeuristicPolicy,
    RunReport,
    SimulatorConfig,
    SimulatorError,
    config_with_overrides,
    run_fleet,
)


class FakeClock:
    """Time that moves only when slept on, or by ``tick`` per event sent."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.now += seconds


class RecordingSink:
    """Keeps every event, with the fake time it was sent at; optionally spends time per event."""

    def __init__(self, clock: FakeClock | None = None, tick_s: float = 0.0) -> None:
        self.events: list[Event] = []
        self.sent_at: list[float] = []
        self._clock, self._tick_s = clock, tick_s

    def send(self, event: Event) -> None:
        self.events.append(event)
        if self._clock is not None:
            self.sent_at.append(self._clock.now)
            self._clock.now += self._tick_s


def _fleet() -> Fleet:
    config = config_with_overrides(SimulatorConfig(), {"users.n_users": 100})
    return Fleet(config, HeuristicPolicy())


def test_unpaced_run_of_n_requests() -> None:
    sink = RecordingSink()
    report = run_fleet(_fleet(), sink, n_requests=2500, batch_size=1000)
    assert report.requests == 2500
    assert report.events == len(sink.events) == sum(report.events_by_type.values())
    assert report.events_by_type["SuggestionOffered"] == 2500
    assert report.ground_truth.requests == 2500
    assert report.events_per_s > 0 and report.requests_per_s > 0


def test_paced_run_never_gets_ahead_of_the_rate() -> None:
    clock, rate = FakeClock(), 1000.0
    sink = RecordingSink(clock)
    report = run_fleet(
        _fleet(), sink, n_requests=5000, rate_per_s=rate, clock=clock.clock, sleep=clock.sleep
    )
    assert report.requests == 5000
    assert report.elapsed_s == pytest.approx(5.0)  # and not slower than the rate either
    offers = 0
    for event, at in zip(sink.events, sink.sent_at, strict=True):
        offers += isinstance(event, SuggestionOffered)
        assert offers <= rate * at + 1e-6
    assert max(clock.slept) <= 0.05 + 1e-9  # ~20 batches a second


def test_duration_with_rate() -> None:
    clock = FakeClock()
    report = run_fleet(
        _fleet(),
        RecordingSink(clock),
        duration_s=2.0,
        rate_per_s=100.0,
        clock=clock.clock,
        sleep=clock.sleep,
    )
    assert 190 <= report.requests <= 200
    assert clock.now == pytest.approx(2.0)


def test_duration_unpaced_stops_on_time() -> None:
    clock = FakeClock()
    sink = RecordingSink(clock, tick_s=1e-4)  # sending costs fake time
    report = run_fleet(
        _fleet(), sink, duration_s=0.5, batch_size=100, clock=clock.clock, sleep=clock.sleep
    )
    assert report.requests > 0
    assert report.elapsed_s >= 0.5  # the last batch may overrun the deadline a little
    assert not clock.slept


def test_progress_about_once_a_second() -> None:
    clock = FakeClock()
    reports: list[RunReport] = []
    run_fleet(
        _fleet(),
        RecordingSink(),
        n_requests=5000,
        rate_per_s=1000.0,
        progress=reports.append,
        clock=clock.clock,
        sleep=clock.sleep,
    )
    assert 4 <= len(reports) <= 5
    assert [r.requests for r in reports] == sorted(r.requests for r in reports)
    assert all(r.elapsed_s >= 1.0 * (i + 1) - 1e-9 for i, r in enumerate(reports))


def test_runs_without_flush_continue_the_stream() -> None:
    first, second = RecordingSink(), RecordingSink()
    fleet = _fleet()
    run_fleet(fleet, first, n_requests=700, flush=False)
    run_fleet(fleet, second, n_requests=800)
    whole = RecordingSink()
    run_fleet(_fleet(), whole, n_requests=1500, batch_size=100)
    assert first.events + second.events == whole.events


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "n_requests or duration_s"),
        ({"n_requests": -1}, "n_requests=-1"),
        ({"duration_s": -1.0}, "duration_s=-1.0"),
        ({"n_requests": 5, "rate_per_s": 0.0}, "rate_per_s=0.0"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(SimulatorError, match=message):
        run_fleet(_fleet(), RecordingSink(), **kwargs)  # type: ignore[arg-type]  # mixed int/float kwargs on purpose


def test_sink_errors_propagate() -> None:
    class Broken:
        def send(self, event: Event) -> None:
            raise BufferError("queue full")

    with pytest.raises(BufferError, match="queue full"):
        run_fleet(_fleet(), Broken(), n_requests=10)
