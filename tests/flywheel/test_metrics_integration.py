"""`flywheel sink` and `flywheel features run` against the real stack, scraped over HTTP.

Both run as `python -m flywheel --log-format json --log-level info ...` subprocesses with
`--metrics-port`; a topic of Rewards (and one record that is not Avro) goes in; their /metrics
must show the records read, consumer lag per partition back at 0, the dead letter by stage and
cause, and what they wrote. Their log lines on stderr are JSON from the named service.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from flywheel.listen import free_port
from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topics import TopicSpec
from tests.feature_store.feature_events import MINUTE_MS, T0_MS, reward

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
GOOD = 40
PARTITIONS = 2
RECORDS_OUT = "flywheel_records_produced_total"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(port: int) -> Samples | None:
    """name -> [(labels, value)] of every sample, or None while the endpoint is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def one(samples: Samples, name: str, **labels: str) -> float:
    found = [v for got, v in samples.get(name, []) if labels.items() <= got.items()]
    assert len(found) == 1, f"{name} {labels}: {samples.get(name)}"
    return found[0]


@pytest.fixture
def source(stack: Settings, unique: str) -> str:
    topic = f"{unique}.rewards"
    TopicAdmin(stack.kafka_client_config()).ensure(
        [TopicSpec(topic, "k", "v", PARTITIONS)]
        + [TopicSpec(f"{unique}.{name}", "k", "v", 1) for name in ("updates", "dlq-s", "dlq-f")]
    )
    codec = AvroCodec.for_url(stack.registry_url)
    producer = Producer(stack.kafka_client_config())
    for k in range(GOOD):
        record = reward(T0_MS + k * MINUTE_MS, user=f"user:{k % 3}", accepted=k % 4 == 0)
        producer.produce(topic, codec.encode("rewards", record), f"sess-{k % 5}".encode())
    producer.produce(topic, b"not avro at all", b"sess-bad")
    assert producer.flush(30) == 0
    return topic


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "flywheel", "--log-format", "json", "--log-level", "info"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [*command, *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )


@pytest.fixture
def services(
    source: str, unique: str, tmp_path: Path
) -> Iterator[tuple[dict[str, int], dict[str, Path]]]:
    ports = {"sink": free_port(), "features": free_port()}
    logs = {name: tmp_path / f"{name}.log" for name in ports}
    common = ["--status-every", "300ms", "--metrics-host", "127.0.0.1", "--metrics-port"]
    sink = start(
        ["sink", "--topic", f"{source}=rewards",
         "--lake", str(tmp_path / "lake"), "--group", f"{unique}.sink",
         "--dlq-topic", f"{unique}.dlq-s", "--max-age", "1s", *common, str(ports["sink"])],
        logs["sink"],
    )  # fmt: skip
    features = start(
        ["features", "run", "--topic", f"{source}=rewards", "--updates-topic",
         f"{unique}.updates", "--dlq-topic", f"{unique}.dlq-f", "--flush-every", "200ms",
         *common, str(ports["features"])],
        logs["features"],
    )  # fmt: skip
    processes = [sink, features]
    try:
        yield ports, logs
        for process in processes:  # a clean stop: SIGTERM flushes, commits and exits 0
            process.send_signal(signal.SIGTERM)
        for process in processes:
            assert process.wait(60) == 0, process.args
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def eventually(port: int, check: Callable[[Samples], bool], timeout_s: float = 30) -> Samples:
    """The first scrape within ``timeout_s`` that passes ``check`` (AssertionError if none)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(port)
        if samples is not None and check(samples):
            return samples
        assert time.monotonic() < deadline, samples
        time.sleep(0.3)


def _settled(samples: Samples | None, records: int) -> bool:
    """True once the service has read every record and reports no lag on any partition."""
    if samples is None:
        return False
    consumed = [v for _, v in samples.get("flywheel_records_consumed_total", [])]
    lags = [v for _, v in samples.get("flywheel_consumer_lag", [])]
    return consumed == [records] and len(lags) == PARTITIONS and not any(lags)


def test_sink_and_feature_processor_expose_their_metrics(
    services: tuple[dict[str, int], dict[str, Path]], source: str
) -> None:
    ports, logs = services
    # The sink counts every message read; the feature processor the records it decoded.
    wanted = {"sink": GOOD + 1, "features": GOOD}
    got: dict[str, Samples | None] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = {name: scrape(port) for name, port in ports.items()}
        if all(_settled(got[name], wanted[name]) for name in ports):
            break
        time.sleep(0.5)
    sink, features = got["sink"], got["features"]
    assert sink is not None and _settled(sink, wanted["sink"]), sink
    assert features is not None and _settled(features, wanted["features"]), features

    for service, samples in (("sink", sink), ("features", features)):
        partitions = {labels["partition"] for labels, _ in samples["flywheel_consumer_lag"]}
        assert partitions == {"0", "1"}
        assert {labels["topic"] for labels, _ in samples["flywheel_consumer_lag"]} == {source}
        dlq = one(samples, "flywheel_dead_letters_total", service=service, stage=service)
        assert dlq == 1
        assert one(samples, "process_resident_memory_bytes") > 0

    causes = {labels["cause"] for labels, _ in sink["flywheel_dead_letters_total"]}
    assert causes == {"bad_magic"}
    # Rows reach the lake with the next rotation (1 s); caught up follows the partitions' EOF.
    sink = eventually(ports["sink"], lambda m: one(m, RECORDS_OUT, output="lake_rows") == GOOD)
    assert one(sink, RECORDS_OUT, output="lake_files") >= PARTITIONS
    assert one(sink, "flywheel_sink_bytes_written_total") > 0
    features = eventually(ports["features"], lambda m: one(m, "flywheel_features_caught_up") == 1)
    assert one(features, RECORDS_OUT, output="feature_updates") > 0
    assert one(features, "flywheel_features_series") > 0

    for service, log in logs.items():
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        started = [x for x in lines if str(x["message"]).startswith("metrics on http://")]
        assert started and started[0]["service"] == service and started[0]["level"] == "info"
