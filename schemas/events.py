"""Typed events: one frozen dataclass per schema in ``schemas/avro/``, fields in schema order.

The ``.avsc`` files are the contract and document every field; these classes mirror them
(``tests/schemas`` checks names, order, types and nullability, so they cannot drift). Convert
with ``event.to_record()`` / ``SuggestionOffered.from_record(d)`` and write with
``fastavro.schemaless_writer(out, parsed_schema(event.SCHEMA_NAME), event.to_record())``.

Conventions: ids are strings; times are timezone-aware UTC datetimes with millisecond precision
(``event_id`` and ``event_time`` default to a fresh UUID and now); Avro arrays are tuples and
maps are mappings; nullable fields default to None. ``float`` arrays (``context``,
``behaviour_logprobs``) are float32 on the wire, so a value comes back rounded to float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import ClassVar

from schemas.enums import (
    AgentReaction,
    Channel,
    Decision,
    ModelEventType,
    Outcome,
    ReplicaState,
    RewardSource,
    SuggestionTrigger,
)
from schemas.records import AvroRecord, new_event_id, now_ms


@dataclass(frozen=True, kw_only=True, slots=True)
class Event(AvroRecord):
    """The fields every event starts with (DESIGN §4); not an event by itself."""

    SCHEMA_NAME: ClassVar[str] = ""

    event_id: str = field(default_factory=new_event_id)
    event_time: datetime = field(default_factory=now_ms)
    producer: str  # "<component>/<instance>", e.g. "ide-sdk/c-5f1e9a2b"


@dataclass(frozen=True, kw_only=True, slots=True)
class SuggestionOffered(Event):
    """One per suggestion request: context, decision and its propensity."""

    SCHEMA_NAME: ClassVar[str] = "SuggestionOffered"

    suggestion_id: str
    request_id: str
    session_id: str
    user_id: str
    repo_id: str
    language: str
    ide: str
    trigger: SuggestionTrigger
    model_name: str
    model_version: int
    decision: Decision
    propensity: float
    context: tuple[float, ...]
    context_spec: str
    suggestion_chars: int
    suggestion_lines: int
    latency_ms: int
    privacy_mode: bool
    suggestion_text: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SuggestionOutcome(Event):
    """What the user did with a shown suggestion."""

    SCHEMA_NAME: ClassVar[str] = "SuggestionOutcome"

    suggestion_id: str
    session_id: str
    outcome: Outcome
    accepted_chars: int
    time_to_decision_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class EditObserved(Event):
    """An edit after an acceptance, for code-survival rewards."""

    SCHEMA_NAME: ClassVar[str] = "EditObserved"

    session_id: str
    suggestion_id: str | None = None
    chars_inserted: int
    chars_deleted: int
    accepted_chars_retained: int | None = None
    elapsed_since_acceptance_ms: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TestRunCompleted(Event):
    """A test run, with the suggestions the client attributes to it."""

    SCHEMA_NAME: ClassVar[str] = "TestRunCompleted"
    __test__: ClassVar[bool] = False  # its name starts with "Test"; pytest must not collect it

    session_id: str
    run_id: str
    tests_passed: int
    tests_failed: int
    tests_errored: int
    duration_ms: int
    suggestion_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutResult(Event):
    """One agent trial; parallel trials of a task share ``group_id``."""

    SCHEMA_NAME: ClassVar[str] = "RolloutResult"

    rollout_id: str
    task_id: str
    group_id: str
    model_name: str
    model_version: int
    prompt_tokens: int
    completion_tokens: int
    tool_calls: int
    tests_passed: int
    tests_total: int
    reward_components: Mapping[str, float]
    behaviour_logprobs: tuple[float, ...]
    duration_ms: int
    environment: str = ""
    difficulty: int = 0
    prompt_token_ids: tuple[int, ...] = ()
    completion_token_ids: tuple[int, ...] = ()
    completion_text: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    sandbox_status: str = ""
    sandbox_reason: str | None = None
    turns: int = 1
    completion_mask: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallObserved(Event):
    """One tool call of an agent episode (``arguments`` None in privacy mode)."""

    SCHEMA_NAME: ClassVar[str] = "ToolCallObserved"

    rollout_id: str
    task_id: str
    group_id: str
    model_name: str
    model_version: int
    turn: int
    tool: str
    status: str
    duration_ms: int
    arguments_bytes: int
    observation_bytes: int
    truncated: bool
    arguments: str | None = None
    session_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentTask(Event):
    """A task for the agent; rollout workers run ``group_size`` parallel trials of it."""

    SCHEMA_NAME: ClassVar[str] = "AgentTask"

    task_id: str
    environment: str
    difficulty: int
    group_size: int
    spec: str


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentCompletion(Event):
    """One choice the agent model served through the OpenAI-compatible API (privacy mode: no
    token ids, log-probs or text)."""

    SCHEMA_NAME: ClassVar[str] = "AgentCompletion"

    completion_id: str
    request_id: str
    session_id: str
    user_id: str | None = None
    api_key: str
    model_name: str
    model_version: int
    channel: str
    endpoint: str
    choice_index: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    prompt_token_ids: tuple[int, ...] | None = None
    completion_token_ids: tuple[int, ...] | None = None
    behaviour_logprobs: tuple[float, ...] | None = None
    completion_text: str | None = None
    temperature: float
    top_p: float
    max_tokens: int
    stop: tuple[str, ...] = ()
    finish_reason: str
    speculative: bool = False
    latency_ms: int
    first_token_ms: int | None = None
    privacy_mode: bool
    # v2: tool calls, and the prompt tokens generated in the session's earlier turns.
    turn: int = 0
    tool_call_ids: tuple[str, ...] = ()
    tool_call_names: tuple[str, ...] = ()
    tool_call_error: str | None = None
    prompt_mask: tuple[int, ...] = ()
    prompt_logprobs: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentFeedback(Event):
    """A user's reaction to a served completion."""

    SCHEMA_NAME: ClassVar[str] = "AgentFeedback"

    completion_id: str
    session_id: str
    user_id: str | None = None
    reaction: AgentReaction
    value: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Reward(Event):
    """A reward for a suggestion decision or a rollout; ``event_time`` is the source's."""

    SCHEMA_NAME: ClassVar[str] = "Reward"

    reward_id: str
    source: RewardSource
    source_id: str
    session_id: str | None = None
    group_id: str | None = None
    user_id: str | None = None
    repo_id: str | None = None
    model_name: str
    model_version: int
    decision: Decision | None = None
    propensity: float | None = None
    context: tuple[float, ...] | None = None
    context_spec: str | None = None
    language: str | None = None
    ide: str | None = None
    trigger: SuggestionTrigger | None = None
    reward: float
    reward_components: Mapping[str, float]
    reward_fn: str
    advantage: float | None = None
    attributed_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class FeatureUpdate(Event):
    """The latest value of one (entity, feature, window) as of an event time."""

    SCHEMA_NAME: ClassVar[str] = "FeatureUpdate"

    entity_type: str
    entity_id: str
    feature_name: str
    window: str
    value: float | None = None
    as_of: datetime
    source_event_count: int


@dataclass(frozen=True, kw_only=True, slots=True)
class LakeOffsetRange(AvroRecord):
    """Offsets ``first``..``last`` (inclusive) of one topic partition in the lake."""

    topic: str
    partition: int
    first: int
    last: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingWindow(AvroRecord):
    """The data a version was trained on."""

    mds_dataset: str
    mds_windows: tuple[str, ...]
    lake_ranges: tuple[LakeOffsetRange, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelVersionEvent(Event):
    """One step in a model version's life; ``ope_*`` are the off-policy check's estimates."""

    SCHEMA_NAME: ClassVar[str] = "ModelVersionEvent"

    model_name: str
    version: int
    parent_version: int | None = None
    event_type: ModelEventType
    artifact_uri: str
    artifact_sha256: str
    training_window: TrainingWindow
    reward_fn: str
    metrics: Mapping[str, float]
    ope_dr_value: float | None = None
    ope_dr_lower: float | None = None
    ope_dr_upper: float | None = None
    ope_snips_value: float | None = None
    ope_snips_lower: float | None = None
    ope_snips_upper: float | None = None
    ope_baseline_value: float | None = None
    ope_confidence_level: float | None = None
    ope_effective_sample_size: float | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelPointer(Event):
    """Which version a channel serves, to what share of users, and where its artifact is."""

    SCHEMA_NAME: ClassVar[str] = "ChannelPointer"

    model_name: str
    channel: Channel
    version: int
    traffic_fraction: float
    artifact_uri: str
    artifact_sha256: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplicaAck(Event):
    """A serving replica's state for a version it was asked to load."""

    SCHEMA_NAME: ClassVar[str] = "ReplicaAck"

    replica_id: str
    model_name: str
    version: int
    state: ReplicaState
    serving_version: int | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ErasureRecorded(Event):
    """A user's rows were erased from the lake and the dead-letter topics."""

    SCHEMA_NAME: ClassVar[str] = "ErasureRecorded"

    erasure_id: str
    user_id: str
    rows_removed: int
    files_rewritten: int
    rows_by_topic: Mapping[str, int]


@dataclass(frozen=True, kw_only=True, slots=True)
class IndexedChunk(AvroRecord):
    """A chunk of an indexed file: its hash and 1-based inclusive line range."""

    hash: str
    start_line: int
    end_line: int


@dataclass(frozen=True, kw_only=True, slots=True)
class IndexFileUpdated(Event):
    """A file of a codebase-index workspace: obfuscated path, hash and chunks (never code)."""

    SCHEMA_NAME: ClassVar[str] = "IndexFileUpdated"

    workspace_id: str
    path: str
    file_hash: str
    chunks: tuple[IndexedChunk, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkEmbedded(Event):
    """A chunk's embedding by one embedder: float16 little-endian bytes (never the text)."""

    SCHEMA_NAME: ClassVar[str] = "ChunkEmbedded"

    chunk_hash: str
    embedder_name: str
    embedder_version: str
    dim: int
    vector: bytes


# Schema name → event class, for every schema in schemas/avro/.
EVENT_TYPES: Mapping[str, type[Event]] = MappingProxyType(
    {
        cls.SCHEMA_NAME: cls
        for cls in (
            SuggestionOffered,
            SuggestionOutcome,
            EditObserved,
            TestRunCompleted,
            RolloutResult,
            ToolCallObserved,
            AgentTask,
            AgentCompletion,
            AgentFeedback,
            Reward,
            FeatureUpdate,
            ModelVersionEvent,
            ChannelPointer,
            ReplicaAck,
            ErasureRecorded,
            IndexFileUpdated,
            ChunkEmbedded,
        )
    }
)

# Avro name → Python class, for every named type (events, nested records, enums).
NAMED_TYPES: Mapping[str, type] = MappingProxyType(
    {
        **EVENT_TYPES,
        "TrainingWindow": TrainingWindow,
        "LakeOffsetRange": LakeOffsetRange,
        "IndexedChunk": IndexedChunk,
        **{
            cls.__name__: cls
            for cls in (
                Decision,
                SuggestionTrigger,
                Outcome,
                RewardSource,
                AgentReaction,
                ModelEventType,
                Channel,
                ReplicaState,
            )
        },
    }
)
