"""A Prometheus registry per service: never the global one, so two services in one process never
clash (the CLI's metrics endpoint and each HTTP app's own ``/metrics`` build theirs with it)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
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
