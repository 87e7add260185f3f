import pytest

from schemas.catalog import schema_names
from streams.topics import (
    ALL_TOPICS,
    DLQ_STAGES,
    INDEX_TOPICS,
    LAKE_TOPIC_SCHEMAS,
    PROBE_TOPIC,
    TOPIC_VALUE_SCHEMAS,
    TOPICS,
    dlq_topic,
    topic,
)

DESIGN_TABLE = {  # DESIGN §3: topic -> (key, value, cleanup)
    "telemetry.suggestions": ("session_id", "SuggestionOffered", "delete"),
    "telemetry.outcomes": ("session_id", "SuggestionOutcome", "delete"),
    "telemetry.edits": ("session_id", "EditObserved", "delete"),
    "telemetry.tests": ("session_id", "TestRunCompleted", "delete"),
    "rollouts.results": ("group_id", "RolloutResult", "delete"),
    "rewards": ("session_id or group_id", "Reward", "delete"),
    # DESIGN says "entity key"; one compacted value per feature needs the feature in the key.
    "features.updates": ("entity_type:entity_id:feature:window", "FeatureUpdate", "compact"),
    "models.versions": ("model_name", "ModelVersionEvent", "delete"),
    "models.channels": ("model_name:channel", "ChannelPointer", "compact"),
    "models.acks": ("replica_id", "ReplicaAck", "delete"),
}


def test_every_topic_of_the_design_is_declared_as_designed() -> None:
    declared = {t.name: (t.key, t.value, t.cleanup_policy) for t in TOPICS}
    for name, contract in DESIGN_TABLE.items():
        assert declared[name] == contract


def test_dead_letter_topics_exist_for_every_stage() -> None:
    names = {t.name for t in TOPICS}
    assert {dlq_topic(s) for s in DLQ_STAGES} <= names
    assert "dlq.late" in names


def test_joined_topics_are_co_partitioned() -> None:
    joined = [t for t in TOPICS if t.key == "session_id" or t.name == "rewards"]
    assert len(joined) == 7
    assert len({t.partitions for t in joined}) == 1


def test_model_topics_keep_one_total_order() -> None:
    assert all(t.partitions == 1 for t in TOPICS if t.name.startswith("models."))
    assert topic("models.versions").retention_ms == -1  # append-only history, kept


def test_names_are_unique_and_the_probe_is_apart() -> None:
    names = [t.name for t in ALL_TOPICS]
    assert len(names) == len(set(names))
    assert PROBE_TOPIC not in TOPICS
    assert PROBE_TOPIC.name.startswith("_")


def test_configs_carry_cleanup_and_retention() -> None:
    assert topic("models.channels").configs() == {"cleanup.policy": "compact"}
    assert topic("telemetry.edits").configs() == {
        "cleanup.policy": "delete",
        "retention.ms": str(7 * 24 * 3600 * 1000),
    }


def test_unknown_topic_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        topic("telemetry.nope")


def test_topics_map_to_their_value_schemas_read_only() -> None:
    assert TOPIC_VALUE_SCHEMAS["telemetry.suggestions"] == "SuggestionOffered"
    assert TOPIC_VALUE_SCHEMAS["models.acks"] == "ReplicaAck"
    assert set(TOPIC_VALUE_SCHEMAS.values()) <= set(schema_names())
    assert all(
        TOPIC_VALUE_SCHEMAS[t.name] == t.value for t in TOPICS if t.name in TOPIC_VALUE_SCHEMAS
    )
    with pytest.raises(TypeError):
        TOPIC_VALUE_SCHEMAS["x"] = "y"  # type: ignore[index]  # proving it is read-only


def test_event_topics_keep_their_order() -> None:
    """`flywheel sink`'s default --topics (and the codec's registrations) follow this order."""
    assert tuple(TOPIC_VALUE_SCHEMAS.items()) == (
        ("telemetry.suggestions", "SuggestionOffered"),
        ("telemetry.outcomes", "SuggestionOutcome"),
        ("telemetry.edits", "EditObserved"),
        ("telemetry.tests", "TestRunCompleted"),
        ("rollouts.results", "RolloutResult"),
        ("agent.tasks", "AgentTask"),
        ("agent.tool_calls", "ToolCallObserved"),
        ("agent.completions", "AgentCompletion"),
        ("agent.feedback", "AgentFeedback"),
        ("rewards", "Reward"),
        ("features.updates", "FeatureUpdate"),
        ("models.versions", "ModelVersionEvent"),
        ("models.channels", "ChannelPointer"),
        ("models.acks", "ReplicaAck"),
        ("privacy.erasures", "ErasureRecorded"),
        ("index.files", "IndexFileUpdated"),
        ("index.embeddings", "ChunkEmbedded"),
    )


def test_the_index_topics_are_compacted_kept_forever_and_out_of_the_lake() -> None:
    for name in INDEX_TOPICS:
        spec = topic(name)
        assert spec.configs() == {"cleanup.policy": "compact", "retention.ms": "-1"}
        assert name in TOPIC_VALUE_SCHEMAS
        assert name not in LAKE_TOPIC_SCHEMAS
    # One total order of a workspace's file changes (docs/index.md).
    assert topic("index.files").partitions == 1
    assert set(LAKE_TOPIC_SCHEMAS) == set(TOPIC_VALUE_SCHEMAS) - set(INDEX_TOPICS)
