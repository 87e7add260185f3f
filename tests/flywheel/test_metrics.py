"""flywheel.metrics: the collectors read the services' stats objects at scrape time; the shared
option and the HTTP endpoint."""

from __future__ import annotations

import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import click
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from feature_store.processor import ProcessorStatus
from fleet.metrics import ServingCollector
from fleet.subscriber import ServedModel, ServingSnapshot
from flywheel.errors import MetricsError
from flywheel.listen import free_port
from flywheel.metrics import (
    FeatureProcessorCollector,
    JoinerCollector,
    LearnerCollector,
    SimulatorCollector,
    SinkCollector,
    metrics_options,
    start_metrics_server,
)
from ground.metrics import service_registry
from processors.joiner.stats import JoinerStats
from processors.lake.status import SinkStatus
from schemas.enums import Channel
from streams.client import DeliveryStats

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the exposition text: (name, sorted labels) -> value."""
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_joiner_metrics_follow_the_live_stats() -> None:
    stats = JoinerStats(events=10, rewards=4, late=2, dead_letters=1, groups=3)
    stats.lag_by_partition["telemetry.outcomes/3"] = 7
    registry = service_registry(JoinerCollector(stats))
    got = scrape(registry)
    assert value(got, "flywheel_records_consumed_total", service="joiner") == 10
    assert value(got, "flywheel_records_produced_total", service="joiner", output="rewards") == 4
    lag = value(got, "flywheel_consumer_lag", service="joiner", topic="telemetry.outcomes",
                partition="3")  # fmt: skip
    assert lag == 7
    dlq = "flywheel_dead_letters_total"
    assert value(got, dlq, service="joiner", stage="joiner", cause="late") == 2
    assert value(got, dlq, service="joiner", stage="joiner", cause="rejected") == 1
    assert ("process_resident_memory_bytes", ()) in got  # the process collector rides along
    stats.events += 5  # read at scrape time: no copy was taken
    assert value(scrape(registry), "flywheel_records_consumed_total", service="joiner") == 15


def test_sink_metrics_carry_causes_and_partitions() -> None:
    status = SinkStatus(records=9, rows=8, files=2, bytes_written=1234, partitions=3)
    status.dead_letters.update({"bad_magic": 1})
    status.lag = {"rewards/0": 0, "a.b/11": 5}
    got = scrape(service_registry(SinkCollector(lambda: status)))
    assert value(got, "flywheel_records_consumed_total", service="sink") == 9
    assert value(got, "flywheel_records_produced_total", service="sink", output="lake_rows") == 8
    assert value(got, "flywheel_records_produced_total", service="sink", output="lake_files") == 2
    assert value(got, "flywheel_consumer_lag", service="sink", topic="a.b", partition="11") == 5
    dlq = "flywheel_dead_letters_total"
    assert value(got, dlq, service="sink", stage="sink", cause="bad_magic") == 1
    assert value(got, "flywheel_sink_bytes_written_total", service="sink") == 1234
    assert value(got, "flywheel_sink_partitions", service="sink") == 3


def test_feature_processor_metrics() -> None:
    status = ProcessorStatus(records=5, updates=2, series=4, caught_up=True, watermark_ms=1500)
    status.dead_letters["bad_magic"] += 1
    status.lag = {"rewards/2": 1}
    got = scrape(service_registry(FeatureProcessorCollector(lambda: status)))
    assert value(got, "flywheel_records_consumed_total", service="features") == 5
    out = value(
        got, "flywheel_records_produced_total", service="features", output="feature_updates"
    )
    assert out == 2
    assert value(got, "flywheel_consumer_lag", service="features", topic="rewards",
                 partition="2") == 1  # fmt: skip
    dlq = "flywheel_dead_letters_total"
    assert value(got, dlq, service="features", stage="features", cause="bad_magic") == 1
    assert value(got, "flywheel_features_caught_up", service="features") == 1
    assert value(got, "flywheel_features_watermark_seconds", service="features") == 1.5


@dataclass
class LearnerStats:
    """learner.lifecycle.LearnerStats's fields (importing a recipe loads torch: ~10 s)."""

    train_rows: int
    decisions: Counter[str]
    window_rows: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)


def test_learner_decisions_by_kind() -> None:
    stats = LearnerStats(train_rows=100, decisions=Counter(GATE_PASSED=2, PROMOTED=1))
    got = scrape(service_registry(LearnerCollector(stats, "gate")))  # type: ignore[arg-type]
    name = "flywheel_learner_decisions_total"
    assert value(got, name, service="learner", model="gate", decision="gate_passed") == 2
    assert value(got, name, service="learner", model="gate", decision="promoted") == 1
    assert value(got, "flywheel_records_consumed_total", service="learner") == 100


def test_learner_window_rows_and_dead_letters() -> None:
    stats = LearnerStats(train_rows=0, decisions=Counter(),
                         window_rows=Counter(cut=3, overlong=1, greedy=2),
                         dead_letters=Counter(length_mismatch=1))  # fmt: skip
    got = scrape(service_registry(LearnerCollector(stats, "agent-lm")))  # type: ignore[arg-type]
    name = "flywheel_learner_window_rows_total"
    assert value(got, name, service="learner", model="agent-lm", outcome="cut") == 3
    assert value(got, name, service="learner", model="agent-lm", outcome="greedy") == 2
    dlq = "flywheel_dead_letters_total"
    assert value(got, dlq, service="learner", stage="learner", cause="length_mismatch") == 1


@dataclass
class Replica:
    """The attributes of fleet.subscriber.ModelSubscriber that ServingCollector reads."""

    replica_id: str
    model_name: str = "gate"
    snapshot: ServingSnapshot[Any] = field(default_factory=ServingSnapshot)
    rejected: int = 0

    @property
    def serving_version(self) -> int:
        production = self.snapshot.production
        return production.version if production else 0


def test_serving_version_per_replica_and_channel() -> None:
    served = ServingSnapshot(
        production=ServedModel(Channel.PRODUCTION, 3, object(), "sha", 1.0),
        canary=ServedModel(Channel.CANARY, 4, object(), "sha2", 0.1),
    )
    replicas = [Replica("r1", snapshot=served, rejected=1), Replica("r2")]
    got = scrape(service_registry(ServingCollector(replicas)))  # type: ignore[arg-type]
    name = "flywheel_model_version"
    labels = {"service": "serving", "model": "gate"}
    assert value(got, name, replica="r1", channel="production", **labels) == 3
    assert value(got, name, replica="r1", channel="canary", **labels) == 4
    assert value(got, name, replica="r2", channel="production", **labels) == 0
    r2_canary = {**labels, "replica": "r2", "channel": "canary"}
    assert (name, tuple(sorted(r2_canary.items()))) not in got
    assert value(got, "flywheel_serving_rejected_versions_total", replica="r1", **labels) == 1


def test_simulator_before_and_after_its_first_report() -> None:
    reports: list[Any] = []
    collector = SimulatorCollector(lambda: reports[0] if reports else None, DeliveryStats)
    registry = service_registry(collector)
    got = scrape(registry)
    assert value(got, "flywheel_sdk_deliveries_total", service="simulator", result="acked") == 0

    @dataclass
    class Report:
        events: int = 30
        requests: int = 10

    reports.append(Report())
    got = scrape(registry)
    assert value(got, "flywheel_records_produced_total", service="simulator", output="events") == 30


def test_the_server_serves_metrics_and_refuses_a_taken_port() -> None:
    assert start_metrics_server(0, CollectorRegistry()) is None  # 0: off
    stats = JoinerStats(events=3)
    server = start_metrics_server(free_port(), service_registry(JoinerCollector(stats)),
                                  "127.0.0.1")  # fmt: skip
    assert server is not None
    try:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            body = response.read().decode()
        assert 'flywheel_records_consumed_total{service="joiner"} 3.0' in body
        with pytest.raises(MetricsError, match="--metrics-port"):
            start_metrics_server(server.port, CollectorRegistry(), "127.0.0.1")
    finally:
        server.close()


@click.command()
@metrics_options
def _probe(metrics_port: int, metrics_host: str) -> None:
    click.echo(f"{metrics_host}:{metrics_port}")


@pytest.fixture
def _no_metrics_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLYWHEEL_METRICS_PORT", raising=False)
    monkeypatch.delenv("FLYWHEEL_METRICS_HOST", raising=False)


@pytest.mark.usefixtures("_no_metrics_env")
def test_the_option_defaults_off_and_reads_the_environment() -> None:
    runner = CliRunner()
    assert runner.invoke(_probe, []).output.strip() == "0.0.0.0:0"
    env = {"FLYWHEEL_METRICS_PORT": "9400", "FLYWHEEL_METRICS_HOST": "127.0.0.1"}
    assert runner.invoke(_probe, [], env=env).output.strip() == "127.0.0.1:9400"
    assert (
        runner.invoke(_probe, ["--metrics-port", "9401"], env=env).output.strip().endswith(":9401")
    )
    assert runner.invoke(_probe, ["--metrics-port", "70000"]).exit_code == 2
