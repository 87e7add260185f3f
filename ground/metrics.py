"""A Prometheus registry per service: never the global one, so two services in one process never
clash (the CLI's metrics endpoint and each HTTP app's own ``/metrics`` build theirs with it)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector


def service_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry of its own (never the global one: two services in one process never clash)
    with ``collectors`` and the process and Python collectors (CPU, memory, open files)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    for collector in collectors:
        registry.register(collector)
    return registry


LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class RouteMetrics:
    """An HTTP service's registry with requests by route and status and their latency
    (``<namespace>_requests_total``, ``<namespace>_request_duration_seconds``); services add
    their own collectors to ``registry``. Routes outside ``routes`` are labelled ``other``, so
    label values stay bounded; ``ground.asgi.RequestMetricsMiddleware`` calls
    :meth:`record_request`."""

    def __init__(self, namespace: str, routes: Iterable[str], *collectors: Collector) -> None:
        self.namespace = namespace
        self._routes = frozenset(routes)
        self.registry = service_registry(*collectors)
        self.requests = Counter(
            f"{namespace}_requests", "HTTP requests by route and status.",
            ["route", "status"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            f"{namespace}_request_duration_seconds", "Time to answer a request, by route.",
            ["route"], buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip

    def route_label(self, path: str) -> str:
        return path if path in self._routes else "other"

    def record_request(self, path: str, status: int, seconds: float) -> None:
        route = self.route_label(path)
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """(exposition text, its content type)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
