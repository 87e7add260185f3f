"""Shared fixtures. Integration tests use a real local stack of their own, started once per
session.

The test stack (`tests/test-stack.env`: its own state directory and ports) is not the one
`make demo` runs on, so tests that exercise the platform's own topic names (the gateway, the
fleet, the demo end to end) never leave events on the demo's topics. With an external cluster
configured (FLYWHEEL_BOOTSTRAP_SERVERS), tests use that. A test stack already running is reused
and left running; one this session started is stopped at the end. Each test gets its own topics
and consumer groups where it can.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from ground.store import Store
from streams.stack.local import LocalStack

TEST_STACK_ENV = Path(__file__).with_name("test-stack.env")


def _use_the_test_stack() -> None:
    """Point this process and every subprocess a test starts at the test stack (set here, at
    collection, before anything reads the settings)."""
    if os.environ.get("FLYWHEEL_BOOTSTRAP_SERVERS"):
        return
    root = Path(__file__).resolve().parents[1]
    for line in TEST_STACK_ENV.read_text().splitlines():
        name, sep, value = (part.strip() for part in line.partition("="))
        if sep and not line.startswith("#"):
            os.environ[name] = str(root / value) if name == "FLYWHEEL_HOME" else value


_use_the_test_stack()


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> Iterator[Settings]:
    """Settings of a running broker + registry with the platform's topics in place."""
    local = LocalStack(settings.home, settings.ports) if settings.uses_local_stack else None
    already_running = local is None or all(s.running for s in local.status())
    ensure_infrastructure(settings, lambda _: None)
    yield settings
    if local is not None and not already_running:
        local.down()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A name no other test uses: for topics, subjects and consumer groups."""
    base = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name)[:40].strip("-")
    return f"test.{base}.{uuid.uuid4().hex[:8]}"


ReadTopic = Callable[[str, int], list[tuple[bytes | None, bytes | None]]]


@pytest.fixture
def read_topic(stack: Settings, unique: str) -> ReadTopic:
    """Reads `count` records of a topic from the beginning (30 s at most) as (key, value) pairs."""

    def read(topic: str, count: int) -> list[tuple[bytes | None, bytes | None]]:
        consumer = Consumer(
            {**stack.kafka_client_config(), "group.id": unique, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        try:
            while len(got) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    got.append((msg.key(), msg.value()))
        finally:
            consumer.close()
        return got

    return read


@pytest.fixture
def stack_store(stack: Settings, unique: str) -> Callable[[str], Store]:
    """`at(name)`: the store at `s3://flywheel/<unique>/<name>` in the local stack's S3 server
    (a prefix no other test uses). Skips with an external cluster: it has no local store."""
    if not stack.uses_local_stack:
        pytest.skip("an external cluster is configured: there is no local object store")
    return lambda name: Store.at(stack.storage(f"s3://flywheel/{unique}/{name}"))
