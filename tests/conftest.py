"""Shared fixtures. Integration tests use the real local stack, started once per session.

A stack that is already running (from `flywheel stack up`) is reused and left running; a stack
this session started is stopped at the end. Each test gets its own topics and consumer groups.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer

from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from streams.stack.local import LocalStack


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
