"""Prometheus metrics of one gateway app, in a registry of its own (two apps in one process,
as in tests, never share or clash on counters).

Label values are bounded: routes are the app's own paths (anything else is `other`), event types
are the gateway's five (anything a client made up is `unknown`), reasons are `ReasonCode`s.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from ground.metrics import RouteMetrics
from streams.gateway.errors import ReasonCode
from streams.gateway.parsing import GATEWAY_EVENT_TYPES

_NS = "flywheel_gateway"
_BODY_BUCKETS_BYTES = tuple(float(4**n) for n in range(3, 12))  # 64 B .. 4 MiB


class GatewayMetrics(RouteMetrics):
    """The gateway's counters and histograms; `render()` gives the exposition text."""

    def __init__(self, routes: tuple[str, ...]) -> None:
        super().__init__(_NS, routes)
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

    def event_accepted(self, event_type: str) -> None:
        self.accepted.labels(event_type).inc()

    def event_refused(self, event_type: str | None, reason: ReasonCode) -> None:
        label = event_type if event_type in GATEWAY_EVENT_TYPES else "unknown"
        self.refused.labels(label, reason).inc()
