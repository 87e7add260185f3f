"""The fleet's Prometheus collector: the model version each replica serves, per channel."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:  # the collector only reads attributes
    from fleet.subscriber import ModelSubscriber

MODEL_VERSION = "flywheel_model_version"


class ServingCollector:
    """Serving replicas (``fleet.subscriber.ModelSubscriber``): the version each serves per
    channel (production falls back to the fallback version; an idle canary is left out)."""

    def __init__(self, replicas: Iterable[ModelSubscriber[Any]], service: str = "serving") -> None:
        self._replicas, self._service = list(replicas), service

    def collect(self) -> Iterator[Metric]:
        version = GaugeMetricFamily(
            MODEL_VERSION,
            "Model version a replica serves, per channel.",
            labels=["service", "replica", "model", "channel"],
        )
        rejected = CounterMetricFamily(
            "flywheel_serving_rejected_versions",
            "Versions a replica refused (bad artifact or loader failure).",
            labels=["service", "replica", "model"],
        )
        for replica in self._replicas:
            ids = [self._service, replica.replica_id, replica.model_name]
            version.add_metric([*ids, "production"], replica.serving_version)
            canary = replica.snapshot.canary
            if canary is not None:
                version.add_metric([*ids, "canary"], canary.version)
            rejected.add_metric(ids, replica.rejected)
        yield version
        yield rejected
