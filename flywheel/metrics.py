"""Prometheus metrics of Flywheel's long-running services, one way for all of them.

Every service command takes ``--metrics-port`` (0, the default, turns metrics off;
FLYWHEEL_METRICS_PORT gives the default) and ``--metrics-host`` (FLYWHEEL_METRICS_HOST, default
0.0.0.0) through :func:`metrics_options`, builds a registry with :func:`service_registry` and
serves it on ``GET /metrics`` from a daemon thread while it runs (:func:`metrics_endpoint`, a
``with`` block around :func:`start_metrics_server`).

Collectors read the stats objects the services already keep for their status lines, at scrape
time: a metric costs nothing per event. Their figures are as fresh as those objects (the lake
sink and the feature processor refresh consumer lag with each status line, every
``--status-every``). Label values are bounded: services, stages and causes are fixed words,
topics and partitions are the ones a service reads, channels are production and canary.

The metric families every service shares (``service`` label on each):

==============================================  =======  =======================================
family                                          type     labels
==============================================  =======  =======================================
flywheel_records_consumed_total                 counter  service
flywheel_records_produced_total                 counter  service, output
flywheel_consumer_lag                           gauge    service, topic, partition
flywheel_dead_letters_total                     counter  service, stage, cause
flywheel_model_version                          gauge    service, replica, model, channel
flywheel_learner_decisions_total                counter  service, model, decision
flywheel_learner_window_rows_total              counter  service, model, outcome
==============================================  =======  =======================================
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from wsgiref.simple_server import WSGIServer

import click
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from flywheel.errors import MetricsError

if TYPE_CHECKING:  # the collectors only read attributes: no Kafka or faust import at run time
    from feature_store.processor import ProcessorStatus
    from fleet.rollout_worker import RolloutStats
    from learner.lifecycle import LearnerStats
    from processors.joiner.stats import JoinerStats
    from processors.lake.status import SinkStatus
    from simulator import RunReport
    from streams.client import DeliveryStats

PORT_ENV = "FLYWHEEL_METRICS_PORT"
HOST_ENV = "FLYWHEEL_METRICS_HOST"
DEFAULT_HOST = "0.0.0.0"

RECORDS_CONSUMED = "flywheel_records_consumed"  # counters: the exposition appends _total
RECORDS_PRODUCED = "flywheel_records_produced"
CONSUMER_LAG = "flywheel_consumer_lag"
DEAD_LETTERS = "flywheel_dead_letters"
LEARNER_DECISIONS = "flywheel_learner_decisions"
LEARNER_WINDOW_ROWS = "flywheel_learner_window_rows"

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)


def metrics_options(f: F) -> F:
    """Adds ``--metrics-port`` and ``--metrics-host`` (parameters ``metrics_port: int`` and
    ``metrics_host: str``) to a click command: the one definition every service uses."""
    f = click.option(
        "--metrics-host",
        envvar=HOST_ENV,
        default=DEFAULT_HOST,
        show_default=True,
        help=f"Address the metrics endpoint listens on (env {HOST_ENV}).",
    )(f)
    return click.option(
        "--metrics-port",
        envvar=PORT_ENV,
        default=0,
        show_default=True,
        type=click.IntRange(0, 65535),
        help=f"Serve Prometheus metrics on http://HOST:PORT/metrics; 0: off (env {PORT_ENV}).",
    )(f)


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it (also on interpreter exit: the
    thread is a daemon)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def start_metrics_server(
    port: int, registry: CollectorRegistry, host: str = DEFAULT_HOST
) -> MetricsServer | None:
    """Serve ``registry`` on ``http://host:port/metrics`` from a daemon thread; None when
    ``port`` is 0 (metrics off). Raises MetricsError when the address cannot be bound."""
    if port == 0:
        return None
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise MetricsError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); pass another "
            f"--metrics-port (or {PORT_ENV}), or 0 to turn metrics off"
        ) from None
    metrics = MetricsServer(host, int(server.server_address[1]), server, thread)
    log.info("metrics on %s", metrics.url)
    return metrics


@contextlib.contextmanager
def metrics_endpoint(
    port: int, host: str, registry: CollectorRegistry
) -> Iterator[MetricsServer | None]:
    """:func:`start_metrics_server` for the duration of a ``with`` block (stopped after it)."""
    server = start_metrics_server(port, registry, host)
    try:
        yield server
    finally:
        if server is not None:
            server.close()


# Collectors --------------------------------------------------------------------------------


def _copy(mapping: Mapping[str, int]) -> dict[str, int]:
    """A copy of a dict another thread may be changing (a copy is one C call under the GIL;
    the retry only guards against a resize racing a Python-level iteration)."""
    for _ in range(3):
        try:
            return dict(mapping)
        except RuntimeError:
            continue
    return {}


def consumed(service: str, count: int) -> Metric:
    family = CounterMetricFamily(RECORDS_CONSUMED, "Records read from Kafka.", labels=["service"])
    family.add_metric([service], count)
    return family


def produced(service: str, by_output: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(
        RECORDS_PRODUCED, "Records written, by output.", labels=["service", "output"]
    )
    for output, count in by_output.items():
        family.add_metric([service, output], count)
    return family


def lag(service: str, by_partition: Mapping[str, int]) -> Metric:
    """``by_partition``: ``"topic/partition"`` -> messages behind the high watermark."""
    family = GaugeMetricFamily(
        CONSUMER_LAG,
        "Messages between the next offset to read and the partition's high watermark.",
        labels=["service", "topic", "partition"],
    )
    for key, behind in sorted(_copy(by_partition).items()):
        topic, _, partition = key.rpartition("/")
        family.add_metric([service, topic, partition], behind)
    return family


def dead_letters(service: str, stage: str, by_cause: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(
        DEAD_LETTERS, "Records sent to a DLQ, by cause.", labels=["service", "stage", "cause"]
    )
    for cause, count in sorted(_copy(by_cause).items()):
        family.add_metric([service, stage, cause], count)
    return family


class JoinerCollector:
    """`flywheel process`: reads the joiner's JoinerStats (mutated by the faust worker)."""

    def __init__(self, stats: JoinerStats, service: str = "joiner") -> None:
        self._stats, self._service = stats, service

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        yield consumed(self._service, s.events)
        yield produced(self._service, {"rewards": s.rewards, "rollout_groups": s.groups})
        yield lag(self._service, s.lag_by_partition)
        # JoinerStats counts undecodable/invalid records together: cause `rejected`.
        yield dead_letters(
            self._service,
            "joiner",
            {"late": s.late, "rejected": s.dead_letters, "orphan": s.expired},
        )


class SinkCollector:
    """`flywheel sink`: reads the LakeSink's live status (``status()`` returns it, no copy)."""

    def __init__(
        self, status: Callable[[], SinkStatus], stage: str = "sink", service: str = "sink"
    ) -> None:
        self._status, self._stage, self._service = status, stage, service

    def collect(self) -> Iterator[Metric]:
        s, service = self._status(), self._service
        yield consumed(service, s.records)
        yield produced(service, {"lake_rows": s.rows, "lake_files": s.files})
        yield lag(service, s.lag)
        yield dead_letters(service, self._stage, s.dead_letters)
        written = CounterMetricFamily(
            "flywheel_sink_bytes_written",
            "Parquet bytes renamed into the lake.",
            labels=["service"],
        )
        written.add_metric([service], s.bytes_written)
        yield written
        yield _gauge("flywheel_sink_partitions", "Partitions assigned now.", service, s.partitions)


class FeatureProcessorCollector:
    """`flywheel features run|serve`: reads the FeatureProcessor's live ProcessorStatus."""

    def __init__(self, status: Callable[[], ProcessorStatus], service: str = "features") -> None:
        self._status, self._service = status, service

    def collect(self) -> Iterator[Metric]:
        s, service = self._status(), self._service
        yield consumed(service, s.records)
        yield produced(service, {"feature_updates": s.updates})
        yield lag(service, s.lag)
        yield dead_letters(service, "features", s.dead_letters)
        yield _gauge("flywheel_features_series", "Feature series in memory.", service, s.series)
        yield _gauge(
            "flywheel_features_caught_up", "1 once the replay has caught up.", service, s.caught_up
        )
        if s.watermark_ms is not None:
            yield _gauge(
                "flywheel_features_watermark_seconds",
                "Latest event time seen (Unix seconds).",
                service,
                s.watermark_ms / 1000,
            )


class LearnerCollector:
    """`flywheel learn`: reads the ContinuousLearner's LearnerStats."""

    def __init__(self, stats: LearnerStats, model: str, service: str = "learner") -> None:
        self._stats, self._model, self._service = stats, model, service

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        yield consumed(self._service, s.train_rows)
        family = CounterMetricFamily(
            LEARNER_DECISIONS,
            "Release-check and canary decisions on versions (gate_passed, gate_failed, promoted, "
            "rolled_back).",
            labels=["service", "model", "decision"],
        )
        for decision, count in sorted(_copy(s.decisions).items()):
            family.add_metric([self._service, self._model, decision.lower()], count)
        yield family
        yield dead_letters(self._service, "learner", s.dead_letters)
        rows = CounterMetricFamily(
            LEARNER_WINDOW_ROWS,
            "Token-window rows cut to fit (trained, prompt shortened) or left out (overlong: the "
            "completion alone exceeds seq_len; greedy: decoded at temperature 0).",
            labels=["service", "model", "outcome"],
        )
        for outcome, count in sorted(_copy(s.window_rows).items()):
            rows.add_metric([self._service, self._model, outcome], count)
        yield rows


class RolloutCollector:
    """`flywheel rollouts`: tasks, trials (passed or not), generated tokens, dead letters, and
    the version each channel of the worker's replica serves."""

    def __init__(self, stats: RolloutStats, dead_letters: Callable[[], int],
                 service: str = "rollouts") -> None:  # fmt: skip
        self._stats, self._dead_letters, self._service = stats, dead_letters, service

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        yield consumed(self._service, s.tasks)
        yield produced(self._service, {"trials": s.trials, "passed": s.passed})
        family = CounterMetricFamily(
            "flywheel_rollout_generated_tokens", "Tokens generated by the agent LM.",
            labels=["service"],
        )  # fmt: skip
        family.add_metric([self._service], s.generated_tokens)
        yield family
        yield dead_letters(self._service, "rollouts", {"invalid": self._dead_letters()})


class SimulatorCollector:
    """`flywheel simulate`: the fleet's last progress report and the SDK's delivery counts."""

    def __init__(
        self,
        report: Callable[[], RunReport | None],
        delivery: Callable[[], DeliveryStats | None],
        service: str = "simulator",
    ) -> None:
        self._report, self._delivery, self._service = report, delivery, service

    def collect(self) -> Iterator[Metric]:
        report, delivery = self._report(), self._delivery()
        if report is not None:
            yield produced(self._service, {"events": report.events, "requests": report.requests})
        if delivery is not None:
            family = CounterMetricFamily(
                "flywheel_sdk_deliveries", "SDK deliveries by result.", labels=["service", "result"]
            )
            for result in ("sent", "acked", "spooled", "failed"):
                family.add_metric([self._service, result], getattr(delivery, result))
            yield family


def _gauge(name: str, documentation: str, service: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=["service"])
    family.add_metric([service], float(value))
    return family
