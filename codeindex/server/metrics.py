"""Prometheus metrics of one index server, in a registry of its own (`ground.metrics`).

Routes are labelled by their template (`/v1/index/{ws}/search`), never by a workspace id, so
label values stay bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from ground.metrics import service_registry

_NS = "flywheel_index"
_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WORKSPACE = re.compile(r"^/v1/index/[^/]+")
# The app's routes: their templates are the `route` label values.
PREFIX = "/v1/index/{ws}"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROUTES = (
    *(f"{PREFIX}/{step}" for step in ("root", "children", "files", "chunks", "search", "status")),
    PREFIX, HEALTH_PATH, METRICS_PATH,
)  # fmt: skip


class IndexMetrics:
    """Requests, chunks embedded, cache hits, search latency, and the state's sizes at scrape
    time (`workspaces`, `embeddings`: callables the app passes)."""

    def __init__(
        self,
        routes: tuple[str, ...] = ROUTES,
        workspaces: Callable[[], float] = lambda: 0.0,
        embeddings: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.registry = service_registry()
        self._routes = frozenset(routes)
        self.requests = Counter(
            f"{_NS}_requests", "HTTP requests by route and status.",
            ["route", "status"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            f"{_NS}_request_duration_seconds", "Time to answer a request, by route.",
            ["route"], buckets=_LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        self.chunks_embedded = Counter(
            f"{_NS}_chunks_embedded", "Chunks this server embedded (texts received and dropped).",
            registry=self.registry,
        )  # fmt: skip
        self.cache_hits = Counter(
            f"{_NS}_embedding_cache_hits",
            "Chunks of synced files that already had an embedding (their text was not asked for).",
            registry=self.registry,
        )  # fmt: skip
        self.search_seconds = Histogram(
            f"{_NS}_search_duration_seconds", "Time to embed a query and search, per search.",
            buckets=_LATENCY_BUCKETS_S, registry=self.registry,
        )  # fmt: skip
        Gauge(f"{_NS}_workspaces", "Workspaces held.", registry=self.registry).set_function(
            workspaces
        )
        Gauge(
            f"{_NS}_embeddings", "Embeddings in the shared cache.", registry=self.registry
        ).set_function(embeddings)

    def route_label(self, path: str) -> str:
        """The route template of `path` (`other` for paths the app does not serve)."""
        if path in self._routes:
            return path
        template = _WORKSPACE.sub("/v1/index/{ws}", path, count=1)
        return template if template in self._routes else "other"

    def record_request(self, path: str, status: int, seconds: float) -> None:
        """One HTTP request (`ground.asgi.RequestMetricsMiddleware` calls it)."""
        route = self.route_label(path)
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """(exposition text, its content type)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
