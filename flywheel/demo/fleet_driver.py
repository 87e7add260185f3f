"""The simulated IDE fleet in a background thread, serving whatever the subscriber says.

Between batches the fleet asks ``route`` which policy serves each user (production, or the
canary for a stable share of users), so every model version the learner publishes changes the
data the fleet produces: the flywheel. Events go through the real SDK into Kafka.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from policies.policy import Policy
from simulator import Fleet, run_fleet
from streams.client import TelemetryClient

_CHUNK_S = 1.0  # requests per run_fleet call = one second at the target rate


@dataclass(frozen=True)
class FleetProgress:
    requests: int
    events: int
    events_per_s: float  # over the last reporting interval


class FleetDriver:
    """Runs ``fleet`` through ``client`` at ``rate_per_s`` requests/s until stopped."""

    def __init__(
        self,
        fleet: Fleet,
        client: TelemetryClient,
        rate_per_s: float,
        route: Callable[[str], Policy] | None = None,
    ) -> None:
        self.fleet, self._client, self._rate = fleet, client, rate_per_s
        fleet.router = route
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet", daemon=True)
        self._requests = self._events = 0
        self._last = (time.monotonic(), 0)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        chunk = max(1, int(self._rate * _CHUNK_S))
        try:
            while not self._stop.is_set():
                report = run_fleet(
                    self.fleet, self._client, n_requests=chunk, rate_per_s=self._rate, flush=False
                )
                self._requests += report.requests
                self._events += report.events
        except BaseException as exc:  # surfaced by check(): the demo stops with the cause
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def progress(self) -> FleetProgress:
        now, events = time.monotonic(), self._events
        then, before = self._last
        self._last = (now, events)
        rate = (events - before) / (now - then) if now > then else 0.0
        return FleetProgress(self._requests, events, rate)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop after the current chunk; send the events still pending in simulated time (once;
        a second call does nothing)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.ident is None:
            return  # never started (the demo ran the agent loop only)
        self._thread.join()
        for event in self.fleet.flush():
            self._client.send(event)
