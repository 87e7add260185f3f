"""`flywheel serve` against the real broker: the fallback, then promoted and canary versions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from fleet.serving_app import create_app
from flywheel.clients import codec as make_codec
from flywheel.commands.serve import build_replica, follow
from flywheel.listen import free_port
from flywheel.settings import Settings
from model_registry.artifacts import publish_artifact
from model_registry.registry import (
    ModelRegistry,
    ModelTopics,
)
from policies.gate_net import GatePolicyNet, save_policy
from streams.admin import TopicAdmin

pytestmark = pytest.mark.integration

MODEL = "suggestion-gate"
CONTEXT = [0.0] * 10


@pytest.fixture
def topics(stack: Settings, unique: str) -> ModelTopics:
    names = ModelTopics.prefixed(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(names.specs())
    return names


@pytest.fixture
def registry(stack: Settings, topics: ModelTopics) -> ModelRegistry:
    return ModelRegistry(stack.kafka_client_config(), make_codec(stack), topics=topics)


def register(registry: ModelRegistry, root: Path, version: int, show: float) -> None:
    """Publish a real gate network whose deployed P(show) is ``show`` for every context."""
    source = root / f"src-{version}"
    save_policy(GatePolicyNet(init_show=show), source)
    ref = publish_artifact(root / "models", MODEL, version, source)
    registry.register(MODEL, ref, parent_version=version - 1 or None, reward_fn="tab@1")


def wait_for(check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def metric(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


@pytest.fixture
def served(stack: Settings, topics: ModelTopics) -> Iterator[TestClient]:
    """The app in-process over a real replica, started the way `flywheel serve` starts it."""
    replica = build_replica(stack, MODEL, "serve-it-0", topics=topics, poll_interval_s=0.1)
    caught_up, stop = threading.Event(), threading.Event()
    follower = threading.Thread(target=follow, args=(replica, caught_up, stop), daemon=True)
    follower.start()
    try:
        with TestClient(create_app(replica, ready=caught_up.is_set)) as client:
            yield client
    finally:
        stop.set()
        follower.join(10)
        replica.close()


def test_serves_the_fallback_then_the_promoted_version_then_a_canary(
    served: TestClient, registry: ModelRegistry, tmp_path: Path
) -> None:
    assert wait_for(lambda: served.get("/healthz").status_code == 200)
    first = served.post("/v1/decide", json={"user_id": "u1", "context": CONTEXT}).json()
    assert first == {
        "show_probability": 0.95, "model": MODEL, "version": 0, "channel": "production",
    }  # fmt: skip

    register(registry, tmp_path, 1, show=0.3)
    registry.promote(MODEL, 1)
    request = {"user_id": "u1", "context": CONTEXT, "context_spec": "sim-context@1"}

    def decided_v1() -> dict[str, Any] | None:
        answer: dict[str, Any] = served.post("/v1/decide", json=request).json()
        return answer if answer["version"] == 1 else None

    answer = wait_for(decided_v1)
    assert answer is not None, "the replica did not load v1 within 20 s"
    assert answer["channel"] == "production"
    assert answer["show_probability"] == pytest.approx(0.3, abs=1e-5)

    register(registry, tmp_path, 2, show=0.6)
    registry.start_canary(MODEL, 2, 1.0)  # every user: the routing is deterministic
    assert wait_for(lambda: served.get("/v1/models").json()["canary"])
    results = served.post("/v1/decide", json=[request, {**request, "user_id": "u2"}]).json()
    assert [(r["version"], r["channel"]) for r in results] == [(2, "canary"), (2, "canary")]
    assert results[0]["show_probability"] == pytest.approx(0.6, abs=1e-5)
    too_short = served.post("/v1/decide", json={"user_id": "u1", "context": [0.0] * 3})
    assert too_short.status_code == 400 and "expects 10" in too_short.json()["error"]

    text = served.get("/metrics").text
    ids = {"service": "serving", "replica": "serve-it-0", "model": MODEL}
    assert metric(text, "flywheel_model_version", **ids, channel="production") == 1
    assert metric(text, "flywheel_model_version", **ids, channel="canary") == 2
    models = served.get("/v1/models").json()
    assert models["production"]["version"] == 1 and models["canary"]["traffic_fraction"] == 1.0


def test_the_command_serves_until_sigterm(stack: Settings, unique: str) -> None:
    """The real `flywheel serve` process: healthy, answers, stops cleanly on SIGTERM. Its model
    name is unique, so it reads the platform's channels but has nothing to load or ack."""
    port = free_port()
    command = [sys.executable, "-m", "flywheel", "serve", "--model", unique, "--port", str(port)]
    command += ["--status-every", "500ms"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return process.poll() is not None  # stop waiting if it died

        assert wait_for(healthy, timeout_s=90) and process.poll() is None
        answer = httpx.post(f"{url}/v1/decide", json={"user_id": "u", "context": CONTEXT})
        assert answer.json()["version"] == 0 and answer.json()["model"] == unique
        time.sleep(1.0)  # a status line or two
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    text = " ".join(output.split())  # the console wraps long lines
    assert f"serving {unique} v0 (fallback)" in text  # the periodic status line
    assert f"serve stopped: 1 decisions; last served {unique} v0" in text
