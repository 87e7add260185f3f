"""The registry against the real broker: history, next_version, promote, canary, rollback."""

from __future__ import annotations

from pathlib import Path

import pytest

from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from model_registry.artifacts import ArtifactRef, publish_artifact
from model_registry.errors import ModelRegistryError
from model_registry.registry import (
    ModelRegistry,
    ModelTopics,
)
from schemas.enums import Channel, ModelEventType
from streams.admin import TopicAdmin

pytestmark = pytest.mark.integration


def make_model_topics(stack: Settings, unique: str) -> ModelTopics:
    """Per-test copies of the models.* topics, declared like the originals."""
    names = ModelTopics.prefixed(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(names.specs())
    return names


def publish(tmp_path: Path, version: int, weight: float) -> ArtifactRef:
    source = tmp_path / f"src-{version}"
    source.mkdir()
    (source / "model.json").write_text(f'{{"weight": {weight}}}')
    return publish_artifact(tmp_path / "models", "gate", version, source)


@pytest.fixture
def registry(stack: Settings, unique: str) -> ModelRegistry:
    topics = make_model_topics(stack, unique)
    return ModelRegistry(stack.kafka_client_config(), make_codec(stack), topics=topics)


def test_history_versions_and_next_version(registry: ModelRegistry, tmp_path: Path) -> None:
    assert registry.history("gate") == [] and registry.next_version("gate") == 1
    assert registry.channels("gate") == {}
    v1 = registry.register("gate", publish(tmp_path, 1, 0.1), parent_version=None,
                           reward_fn="tab@1", metrics={"train_loss": 0.5})  # fmt: skip
    assert v1.version == 1 and registry.next_version("gate") == 2
    registry.register("gate", publish(tmp_path, 2, 0.2), parent_version=1, reward_fn="tab@1")
    registry.record_step("gate", 2, ModelEventType.GATE_PASSED, reason="lift",
                         ope_dr_value=0.3, ope_dr_lower=0.25)  # fmt: skip
    registry.register("other", publish(tmp_path, 3, 0.3), parent_version=None, reward_fn="tab@1")

    assert [e.event_type for e in registry.history("gate")] == [
        ModelEventType.REGISTERED, ModelEventType.REGISTERED, ModelEventType.GATE_PASSED,
    ]  # fmt: skip
    versions = registry.versions("gate")
    assert sorted(versions) == [1, 2]
    assert versions[2].status is ModelEventType.GATE_PASSED
    assert versions[2].parent_version == 1 and versions[2].latest.ope_dr_lower == 0.25
    assert versions[2].latest.reason == "lift" and len(versions[2].events) == 2
    assert versions[1].latest.metrics == {"train_loss": 0.5}
    assert registry.next_version("gate") == 3 and registry.next_version("other") == 2
    assert registry.channels("gate")[Channel.CANDIDATE].version == 2
    with pytest.raises(ModelRegistryError, match="already registered"):
        registry.register("gate", publish(tmp_path, 4, 0.4), parent_version=1,
                          reward_fn="tab@1", version=2)  # fmt: skip
    with pytest.raises(ModelRegistryError, match=r"no version 9 \(registered: 1, 2\)"):
        registry.record_step("gate", 9, ModelEventType.GATE_FAILED)


def test_promote_canary_and_rollback_move_the_pointers(
    registry: ModelRegistry, tmp_path: Path
) -> None:
    for version, parent in ((1, None), (2, 1), (3, 2)):
        registry.register("gate", publish(tmp_path, version, version / 10),
                          parent_version=parent, reward_fn="tab@1")  # fmt: skip
    with pytest.raises(ModelRegistryError, match="no production version"):
        registry.rollback("gate")
    registry.promote("gate", 1)
    canary = registry.start_canary("gate", 2, 0.2)
    assert canary.traffic_fraction == 0.2 and canary.artifact_sha256
    pointers = registry.channels("gate")
    assert (pointers[Channel.PRODUCTION].version, pointers[Channel.CANARY].version) == (1, 2)

    registry.promote("gate", 2, reason="canary won")
    pointers = registry.channels("gate")
    assert pointers[Channel.PRODUCTION].version == 2 and Channel.CANARY not in pointers
    registry.promote("gate", 3)
    back = registry.rollback("gate", reason="regression")
    assert back is not None and back.version == 2
    assert registry.channels("gate")[Channel.PRODUCTION].version == 2
    state = registry.version("gate", 3)
    assert state.status is ModelEventType.ROLLED_BACK and state.latest.reason == "regression"
    assert registry.version("gate", 2).status is ModelEventType.PROMOTED

    assert registry.rollback("gate") is not None  # 2 → 1
    with pytest.raises(ModelRegistryError, match="no registered parent"):
        registry.rollback("gate")
    assert registry.rollback("gate", to_fallback=True) is None
    assert Channel.PRODUCTION not in registry.channels("gate")
    with pytest.raises(ModelRegistryError, match="outside"):
        registry.start_canary("gate", 2, 0.0)


def test_stop_canary_rolls_the_canary_back(registry: ModelRegistry, tmp_path: Path) -> None:
    registry.register("gate", publish(tmp_path, 1, 0.1), parent_version=None, reward_fn="tab@1")
    with pytest.raises(ModelRegistryError, match="no canary"):
        registry.stop_canary("gate")
    registry.start_canary("gate", 1, 0.5)
    assert registry.stop_canary("gate", reason="worse online") == 1
    assert Channel.CANARY not in registry.channels("gate")
    assert registry.version("gate", 1).status is ModelEventType.ROLLED_BACK
