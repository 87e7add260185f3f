"""Serving replicas against the real broker: convergence, rejection, rollback, canary routing."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.subscriber import ModelSubscriber
from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from model_registry.artifacts import ArtifactRef, publish_artifact
from model_registry.registry import (
    ModelRegistry,
    ModelTopics,
)
from schemas.enums import Channel, ReplicaState
from schemas.events import ReplicaAck
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topic_io import read_to_end
from streams.topics import MODEL_ACKS_TOPIC

pytestmark = pytest.mark.integration

MODEL = "gate"
FALLBACK = {"weight": 0.0}
Model = dict[str, Any]


def load_json(directory: Path, version: int) -> Model:
    """The test's trivial model: a JSON file."""
    model: Model = json.loads((directory / "model.json").read_text())
    model["version"] = version
    return model


@dataclasses.dataclass
class Fleet:
    stack: Settings
    codec: AvroCodec
    topics: ModelTopics
    registry: ModelRegistry
    models_root: Path
    replicas: list[ModelSubscriber[Model]]

    def replica(self, replica_id: str, loader: Any = load_json) -> ModelSubscriber[Model]:
        subscriber = ModelSubscriber(
            self.stack.kafka_client_config(), self.codec, MODEL, replica_id, loader, FALLBACK,
            topics=self.topics, poll_interval_s=0.1,
        )  # fmt: skip
        self.replicas.append(subscriber)
        return subscriber

    def register(self, version: int, parent: int | None) -> ArtifactRef:
        source = self.models_root.parent / f"src-{version}"
        source.mkdir()
        (source / "model.json").write_text(json.dumps({"weight": version / 10}))
        ref = publish_artifact(self.models_root, MODEL, version, source)
        self.registry.register(MODEL, ref, parent_version=parent, reward_fn="tab@1")
        return ref

    def acks(self) -> list[ReplicaAck]:
        records = read_to_end(self.stack.kafka_client_config(), self.topics.acks, keep=bool)
        return [
            ReplicaAck.from_record(self.codec.decode(MODEL_ACKS_TOPIC, value))
            for _, value in records
            if value is not None
        ]


@pytest.fixture
def fleet(stack: Settings, unique: str, tmp_path: Path) -> Iterator[Fleet]:
    topics = ModelTopics.prefixed(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(topics.specs())
    codec = make_codec(stack)
    registry = ModelRegistry(stack.kafka_client_config(), codec, topics=topics)
    fleet = Fleet(stack, codec, topics, registry, tmp_path / "models", [])
    yield fleet
    for replica in fleet.replicas:
        replica.close()


def served(replicas: list[ModelSubscriber[Model]]) -> list[int]:
    return [r.serving_version for r in replicas]


def test_replicas_converge_reject_a_corrupt_artifact_and_roll_back(fleet: Fleet) -> None:
    replicas = [fleet.replica(f"replica-{i}") for i in range(3)]
    assert [r.poll_once() for r in replicas] == [0, 0, 0]
    assert served(replicas) == [0, 0, 0]
    assert replicas[0].route("u1").model is FALLBACK

    fleet.register(1, None)
    fleet.register(2, 1)
    fleet.registry.promote(MODEL, 1)
    assert [r.poll_once() for r in replicas] == [1, 1, 1]
    assert served(replicas) == [1, 1, 1]
    fleet.registry.promote(MODEL, 2)
    started = time.perf_counter()
    for r in replicas:
        r.poll_once()
    converge_s = time.perf_counter() - started
    assert served(replicas) == [2, 2, 2] and converge_s < 5
    assert replicas[1].route("u1") == (Channel.PRODUCTION, 2, {"weight": 0.2, "version": 2})

    corrupt = fleet.register(3, 2)
    (corrupt.path / "model.json").write_text('{"weight": 666}')  # tampered after publishing
    fleet.registry.promote(MODEL, 3)
    assert [r.poll_once() for r in replicas] == [0, 0, 0]
    assert served(replicas) == [2, 2, 2]
    rejected = [a for a in fleet.acks() if a.version == 3 and a.state is ReplicaState.REJECTED]
    assert sorted(a.replica_id for a in rejected) == ["replica-0", "replica-1", "replica-2"]
    assert all(a.serving_version == 2 and "does not match" in (a.error or "") for a in rejected)

    fleet.registry.rollback(MODEL, reason="v3 rejected by the fleet")  # 3 → 2: nothing to load
    fleet.registry.rollback(MODEL, reason="back to v1")  # 2 → 1
    for r in replicas:
        r.poll_once()
    assert served(replicas) == [1, 1, 1]

    ready = [(a.replica_id, a.version) for a in fleet.acks() if a.state is ReplicaState.READY]
    assert sorted(ready) == sorted((f"replica-{i}", v) for i in range(3) for v in (1, 2, 1))
    assert all(
        a.serving_version == a.version for a in fleet.acks() if a.state is ReplicaState.READY
    )


def test_a_slow_replica_skips_to_the_newest_version(fleet: Fleet) -> None:
    for version in (1, 2, 3):
        fleet.register(version, version - 1 or None)
        fleet.registry.promote(MODEL, version)
    late = fleet.replica("late")
    assert late.poll_once() == 1 and late.serving_version == 3
    loading = [a.version for a in fleet.acks() if a.state is ReplicaState.LOADING]
    assert loading == [3]


def test_a_loader_that_raises_rejects_the_version(fleet: Fleet) -> None:
    def broken(directory: Path, version: int) -> Model:
        raise RuntimeError("out of memory")

    replica = fleet.replica("broken", loader=broken)
    fleet.register(1, None)
    fleet.registry.promote(MODEL, 1)
    assert replica.poll_once() == 0 and replica.serving_version == 0
    [loading, rejected] = fleet.acks()
    assert (loading.state, rejected.state) == (ReplicaState.LOADING, ReplicaState.REJECTED)
    assert rejected.error == "RuntimeError: out of memory" and rejected.serving_version == 0


def test_canary_routing_is_stable_and_close_to_its_fraction(fleet: Fleet) -> None:
    replicas = [fleet.replica(f"replica-{i}") for i in range(2)]
    fleet.register(1, None)
    fleet.register(2, 1)
    fleet.registry.promote(MODEL, 1)
    fleet.registry.start_canary(MODEL, 2, 0.1)
    for r in replicas:
        r.poll_once()
    users = [f"user-{i}" for i in range(20_000)]
    routes = [[r.route(u) for u in users] for r in replicas]
    assert routes[0] == routes[1]  # every replica routes a user the same way
    canary = [u for u, (channel, _, _) in zip(users, routes[0], strict=True)
              if channel is Channel.CANARY]  # fmt: skip
    assert abs(len(canary) / len(users) - 0.1) < 0.01
    assert {r.version for r in routes[0]} == {1, 2}

    fleet.registry.start_canary(MODEL, 2, 0.3)  # a wider canary: no reload, same first users
    assert replicas[0].poll_once() == 0
    wider = {u for u in users if replicas[0].route(u).channel is Channel.CANARY}
    assert set(canary) < wider and abs(len(wider) / len(users) - 0.3) < 0.015

    fleet.registry.promote(MODEL, 2)  # the canary is cleared; its model is reused for production
    replicas[0].poll_once()
    assert replicas[0].snapshot.canary is None and replicas[0].serving_version == 2
    loads = [a for a in fleet.acks() if a.replica_id == "replica-0" and a.version == 2]
    assert [a.state for a in loads] == [
        ReplicaState.LOADING,
        ReplicaState.READY,
        ReplicaState.READY,
    ]


def test_background_thread_follows_promotions(fleet: Fleet) -> None:
    replica = fleet.replica("background")
    replica.start()
    fleet.register(1, None)
    fleet.registry.promote(MODEL, 1)
    started = time.perf_counter()
    while replica.serving_version != 1 and time.perf_counter() - started < 15:
        time.sleep(0.02)
    assert replica.serving_version == 1
    print(f"promoted → served by a background replica in {time.perf_counter() - started:.3f}s")
    replica.stop()


def test_a_cleared_production_channel_returns_replicas_to_the_fallback(fleet: Fleet) -> None:
    replica = fleet.replica("replica")
    fleet.register(1, None)
    fleet.registry.promote(MODEL, 1)
    assert replica.poll_once() == 1 and replica.serving_version == 1
    fleet.registry.rollback(MODEL, reason="bad first version", to_fallback=True)
    assert replica.poll_once() == 1
    assert replica.route("u1") == (Channel.PRODUCTION, 0, FALLBACK)
    late = fleet.replica("late")  # reads the pointer and its tombstone: serves nothing loaded
    assert late.poll_once() == 0 and late.serving_version == 0
