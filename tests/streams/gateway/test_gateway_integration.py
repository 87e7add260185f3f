"""The gateway in front of a real TelemetryClient: what it accepts is what a stock Confluent
AvroDeserializer reads back from the topics, and `flywheel gateway serve` runs end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from flywheel.clients import telemetry_client
from flywheel.listen import free_port
from flywheel.settings import Settings
from schemas.events import EVENT_TYPES, Event, SuggestionOffered
from streams.client import CLIENT_TOPICS, ROUTES
from streams.gateway.app import create_app
from streams.gateway.keys import ApiKeyStore, default_key_path
from tests.readback import Offsets, end_offsets, read_events
from tests.sample_events import one_of_each

pytestmark = pytest.mark.integration
TOPICS = list(CLIENT_TOPICS)


def read_back(
    settings: Settings, event_ids: Iterable[str], since: Offsets
) -> dict[str, dict[str, Any]]:
    """event_id -> record (with its `_topic`) of the wanted events, read with the stock
    AvroDeserializer from the offsets marked before the test produced."""
    return {
        str(r.record["event_id"]): {"_topic": r.topic, **r.record}
        for r in read_events(settings, TOPICS, event_ids, since)
    }


def as_json(event: Event) -> dict[str, Any]:
    return {"type": event.SCHEMA_NAME, **event.to_record()}


def assert_arrived_as_sent(sent: list[Event], found: dict[str, dict[str, Any]]) -> None:
    assert set(found) == {e.event_id for e in sent}
    for event in sent:
        record = dict(found[event.event_id])
        topic = record.pop("_topic")
        assert topic == ROUTES[type(event)][0]
        back = type(event).from_record(record)
        if isinstance(event, SuggestionOffered):  # pseudonymised at the source; the rest as sent
            assert isinstance(back, SuggestionOffered)
            assert back.user_id != event.user_id
            assert back.repo_id != event.repo_id
            back = dataclasses.replace(back, user_id=event.user_id, repo_id=event.repo_id)
        assert back == event


def test_accepted_events_read_back_with_the_stock_deserializer(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    sent = one_of_each(f"s-{uuid.uuid4()}")
    batch: list[Any] = [as_json(e) for e in sent]
    # A client that leaves out event_id and producer and writes event_time as ISO-8601.
    minimal = as_json(one_of_each(f"s-{uuid.uuid4()}")[1])
    del minimal["event_id"], minimal["producer"]
    minimal["event_time"] = "2025-01-31T12:00:00.250+01:00"
    batch.insert(2, minimal)
    batch.insert(1, {**batch[1], "accepted_chars": "lots"})  # wrong type
    batch.insert(4, {"type": "Reward", "reward_id": "r"})  # not a gateway type
    batch.append({k: v for k, v in batch[0].items() if k != "session_id"})  # missing field
    batch.append("not an event")

    keys = ApiKeyStore(tmp_path / "keys.json")
    secret = keys.add("it")
    since = end_offsets(stack, TOPICS)
    client = telemetry_client(stack, name=unique, spool_dir=tmp_path / "spool")
    try:
        http = TestClient(create_app(client, keys))
        response = http.post(
            "/v1/events",
            content=json.dumps(batch),
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
    finally:
        stats = client.close()
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["accepted"], body["refused"]) == (6, 4)
    accepted = [r for r in body["results"] if r["status"] == "accepted"]
    assert stats.acked == 6
    assert stats.spooled == 0

    minimal_id = accepted[2]["event_id"]
    found = read_back(stack, [r["event_id"] for r in accepted], since)
    minimal_event = EVENT_TYPES["SuggestionOutcome"].from_record(
        {**minimal, "event_id": minimal_id, "producer": "gateway/it", "event_time": 1738321200250}
    )
    assert_arrived_as_sent([*sent, minimal_event], found)


def test_flywheel_gateway_serve_end_to_end(stack: Settings, tmp_path: Path) -> None:
    home = tmp_path / "home"
    secret = ApiKeyStore(default_key_path(home)).add("serve-it")
    port = free_port()
    env = {
        **os.environ,
        "FLYWHEEL_HOME": str(home),
        "FLYWHEEL_BOOTSTRAP_SERVERS": stack.kafka_bootstrap,
        "FLYWHEEL_SCHEMA_REGISTRY_URL": stack.registry_url,
    }
    since = end_offsets(stack, TOPICS)
    server = subprocess.Popen(
        [sys.executable, "-m", "flywheel", "gateway", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    sent = one_of_each(f"s-{uuid.uuid4()}")
    try:
        _wait_healthy(base, server)
        response = httpx.post(
            f"{base}/v1/events",
            content="\n".join(json.dumps(as_json(e)) for e in sent),
            headers={"X-API-Key": secret, "Content-Type": "application/x-ndjson"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        assert response.json()["accepted"] == len(sent)
        assert "flywheel_gateway_events_accepted_total" in httpx.get(f"{base}/metrics").text
    finally:
        server.send_signal(signal.SIGTERM)  # what `docker stop` sends
        output, _ = server.communicate(timeout=60)
    assert server.returncode == 0, output
    assert f"gateway on http://127.0.0.1:{port}" in output
    assert f"gateway stopped: {len(sent)} event(s) acknowledged, 0 spooled" in output
    assert_arrived_as_sent(sent, read_back(stack, [e.event_id for e in sent], since))


def _wait_healthy(base: str, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the gateway exited: {server.communicate()[0]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    pytest.fail("the gateway did not answer /healthz within 30 s")
