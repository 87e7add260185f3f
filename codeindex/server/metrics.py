"""Prometheus metrics of one index server, in a registry of its own (`ground.metrics`).

Routes are labelled by their template (`/v1/index/{ws}/search`), never by a workspace id, so
label values stay bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

from ground.metrics import LATENCY_BUCKETS_S, RouteMetrics

_NS = "flywheel_index"
_WORKSPACE = re.compile(r"^/v1/index/[^/]+")
# The app's routes: their templates are the `route` label values.
PREFIX = "/v1/index/{ws}"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROUTES = (
    *(f"{PREFIX}/{step}" for step in ("root", "children", "files", "chunks", "search", "status")),
    PREFIX, HEALTH_PATH, METRICS_PATH,
)  # fmt: skip


class IndexMetrics(RouteMetrics):
    """Requests, chunks embedded, cache hits, search latency, and the state's sizes at scrape
    time (`workspaces`, `embeddings`: callables the app passes)."""

    def __init__(
        self,
        routes: tuple[str, ...] = ROUTES,
        workspaces: Callable[[], float] = lambda: 0.0,
        embeddings: Callable[[], float] = lambda: 0.0,
    ) -> None:
        super().__init__(_NS, routes)
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
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
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
