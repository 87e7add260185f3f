"""Every topic of DESIGN §3, declared once.

All telemetry topics and `rewards` share one partition count and are keyed by `session_id`, so
one session's events are co-partitioned for the joiner. Model topics have one partition: their
consumers need one total order of versions and pointers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

CleanupPolicy = Literal["delete", "compact"]

TELEMETRY_PARTITIONS = 4
DAY_MS = 24 * 3600 * 1000
FOREVER = -1  # retention.ms=-1: never deleted by time


@dataclass(frozen=True)
class TopicSpec:
    """A topic's contract: its key, its value type and the settings it must have."""

    name: str
    key: str
    value: str
    partitions: int
    cleanup_policy: CleanupPolicy = "delete"
    retention_ms: int | None = 7 * DAY_MS  # None: leave the broker's default

    def configs(self) -> dict[str, str]:
        """Topic-level configuration to create it with and to check for drift."""
        out: dict[str, str] = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            out["retention.ms"] = str(self.retention_ms)
        return out


def _telemetry(name: str, value: str) -> TopicSpec:
    return TopicSpec(name, "session_id", value, TELEMETRY_PARTITIONS)


DLQ_STAGES = ("gateway", "joiner", "late", "sink", "features", "rollouts")


def dlq_topic(stage: str) -> str:
    """The dead-letter topic of a processing stage (`dlq.<stage>`)."""
    return f"dlq.{stage}"


# The IDE telemetry topics (co-partitioned by session_id), each with its value schema. The joiner
# joins them per suggestion; the first carries the anchor (the offer).
SUGGESTIONS_TOPIC = "telemetry.suggestions"
OUTCOMES_TOPIC = "telemetry.outcomes"
EDITS_TOPIC = "telemetry.edits"
TESTS_TOPIC = "telemetry.tests"
_TELEMETRY_VALUES = {
    SUGGESTIONS_TOPIC: "SuggestionOffered",
    OUTCOMES_TOPIC: "SuggestionOutcome",
    EDITS_TOPIC: "EditObserved",
    TESTS_TOPIC: "TestRunCompleted",
}
TELEMETRY_TOPICS: tuple[str, ...] = tuple(_TELEMETRY_VALUES)
ROLLOUTS_TOPIC = "rollouts.results"
AGENT_TASKS_TOPIC = "agent.tasks"
# Every tool call of an episode, keyed like its RolloutResult (by group_id).
TOOL_CALLS_TOPIC = "agent.tool_calls"
# Served completions and the users' reactions: telemetry-like, keyed by session_id, so a
# completion and its feedback are co-partitioned for the joiner.
COMPLETIONS_TOPIC = "agent.completions"
FEEDBACK_TOPIC = "agent.feedback"
# What the joiner joins per served completion; the first carries the anchor (the completion).
COMPLETION_TOPICS: tuple[str, ...] = (COMPLETIONS_TOPIC, FEEDBACK_TOPIC)
REWARDS_TOPIC = "rewards"
FEATURE_UPDATES_TOPIC = "features.updates"
MODEL_VERSIONS_TOPIC = "models.versions"
MODEL_CHANNELS_TOPIC = "models.channels"
MODEL_ACKS_TOPIC = "models.acks"
ERASURES_TOPIC = "privacy.erasures"
# The codebase index's event log (docs/index.md): file entries and chunk embeddings, compacted and
# kept forever, so a new index replica rebuilds from them. Files have one partition: a replica
# must apply a workspace's changes in the order they were made (a file replaced by a folder is a
# tombstone, then the folder's files); each embedding stands alone.
INDEX_FILES_TOPIC = "index.files"
INDEX_EMBEDDINGS_TOPIC = "index.embeddings"
INDEX_EMBEDDINGS_PARTITIONS = 4

# The topics that carry platform events: ``value`` names the schema (schemas/avro/<value>.avsc).
EVENT_TOPICS: tuple[TopicSpec, ...] = (
    *(_telemetry(name, value) for name, value in _TELEMETRY_VALUES.items()),
    TopicSpec(ROLLOUTS_TOPIC, "group_id", "RolloutResult", TELEMETRY_PARTITIONS),
    TopicSpec(AGENT_TASKS_TOPIC, "task_id", "AgentTask", TELEMETRY_PARTITIONS),
    TopicSpec(TOOL_CALLS_TOPIC, "group_id", "ToolCallObserved", TELEMETRY_PARTITIONS),
    _telemetry(COMPLETIONS_TOPIC, "AgentCompletion"),
    _telemetry(FEEDBACK_TOPIC, "AgentFeedback"),
    TopicSpec(
        REWARDS_TOPIC, "session_id or group_id", "Reward", TELEMETRY_PARTITIONS,
        retention_ms=30 * DAY_MS,
    ),
    TopicSpec(
        FEATURE_UPDATES_TOPIC, "entity_type:entity_id:feature:window", "FeatureUpdate",
        TELEMETRY_PARTITIONS, cleanup_policy="compact", retention_ms=None,
    ),
    TopicSpec(MODEL_VERSIONS_TOPIC, "model_name", "ModelVersionEvent", 1, retention_ms=FOREVER),
    TopicSpec(
        MODEL_CHANNELS_TOPIC, "model_name:channel", "ChannelPointer", 1,
        cleanup_policy="compact", retention_ms=None,
    ),
    TopicSpec(MODEL_ACKS_TOPIC, "replica_id", "ReplicaAck", 1),
    # Not in DESIGN §3: erasures, compacted so a replaying consumer always sees every erased user.
    TopicSpec(
        ERASURES_TOPIC, "user_id", "ErasureRecorded", 1,
        cleanup_policy="compact", retention_ms=None,
    ),
    TopicSpec(
        INDEX_FILES_TOPIC, "workspace_id/path", "IndexFileUpdated", 1,
        cleanup_policy="compact", retention_ms=FOREVER,
    ),
    TopicSpec(
        INDEX_EMBEDDINGS_TOPIC, "embedder_name:embedder_version@chunk_hash", "ChunkEmbedded",
        INDEX_EMBEDDINGS_PARTITIONS, cleanup_policy="compact", retention_ms=FOREVER,
    ),
)  # fmt: skip

TOPICS: tuple[TopicSpec, ...] = (
    *EVENT_TOPICS,
    *(
        TopicSpec(
            dlq_topic(stage), "original key", "original bytes + error headers", 1,
            retention_ms=14 * DAY_MS,
        )
        for stage in DLQ_STAGES
    ),
)  # fmt: skip

# Topic → the name of its value schema, in declaration order (the codec's registrations, the
# doctor's checks). Read-only.
TOPIC_VALUE_SCHEMAS: Mapping[str, str] = MappingProxyType({t.name: t.value for t in EVENT_TOPICS})

# The event topics the lake takes by default (`flywheel sink`'s default topics, the analysts'
# views): all but the codebase index's, whose rows are hashes and embedding bytes, no analyst
# table (docs/lake.md). `flywheel sink --topic index.files` still lands one on request.
INDEX_TOPICS: tuple[str, ...] = (INDEX_FILES_TOPIC, INDEX_EMBEDDINGS_TOPIC)
LAKE_TOPIC_SCHEMAS: Mapping[str, str] = MappingProxyType(
    {t: s for t, s in TOPIC_VALUE_SCHEMAS.items() if t not in INDEX_TOPICS}
)

# Not in DESIGN §3: the stack's smoke check (`flywheel demo`, tests) round-trips an Avro probe
# record through it, so the contract topics never carry test traffic.
PROBE_TOPIC = TopicSpec("_flywheel.probe", "probe_id", "StackProbe", 1, "delete", DAY_MS)

ALL_TOPICS: tuple[TopicSpec, ...] = (*TOPICS, PROBE_TOPIC)


def topic(name: str) -> TopicSpec:
    """The declared spec of `name`; KeyError if it is not declared."""
    for spec in ALL_TOPICS:
        if spec.name == name:
            return spec
    raise KeyError(name)
