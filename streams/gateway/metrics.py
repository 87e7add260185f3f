"""Prometheus metrics of one gateway app, in a registry of its own (two apps in one process,
as in tests, never share or clash on counters).

Label values are bounded: routes are the app's own paths (anything else is `other`), event types
are the gateway's five (anything a client made up is `unknown`), reasons are `ReasonCode`s.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from streams.gateway.errors import ReasonCode
from streams.gateway.parsing import GATEWAY_EVENT_TYPES

_NS = "flywheel_gateway"
_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BODY_BUCKETS_BYTES = tuple(float(4**n) for n in range(3, 12))  # 64 B .. 4 MiB


class GatewayMetrics:
    """The gateway's counters and histograms; `render()` gives the exposition text."""

    def __init__(self, routes: tuple[str, ...]) -> None:
        self.registry = CollectorRegistry()
        self._routes = frozenset(routes)
        self.requests = Counter(
            f"{_NS}_requests", "HTTP requests by route and status.",
            ["route", "status"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            f"{_NS}_request_duration_seconds", "Time to answer a request, by route.",
            ["route"], buckets=_LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        self.body_bytes = Histogram(
            f"{_NS}_request_body_bytes", "Bytes of event request bodies read (up to the limit).",
            buckets=_BODY_BUCKETS_BYTES, registry=self.registry,
        )  # fmt: skip
        self.accepted = Counter(
            f"{_NS}_events_accepted", "Events validated and handed to the SDK, by type.",
            ["event_type"], registry=self.registry,
        )  # fmt: skip
        self.refused = Counter(
            f"{_NS}_events_refused", "Events refused, by type and reason.",
            ["event_type", "reason"], registry=self.registry,
        )  # fmt: skip

    def route_label(self, path: str) -> str:
        return path if path in self._routes else "other"

    def record_request(self, path: str, status: int, seconds: float) -> None:
        """One HTTP request (``ground.asgi.RequestMetricsMiddleware`` calls it)."""
        route = self.route_label(path)
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def event_accepted(self, event_type: str) -> None:
        self.accepted.labels(event_type).inc()

    def event_refused(self, event_type: str | None, reason: ReasonCode) -> None:
        label = event_type if event_type in GATEWAY_EVENT_TYPES else "unknown"
        self.refused.labels(label, reason).inc()

    def render(self) -> tuple[bytes, str]:
        """(exposition text, its content type)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
