"""schemas.events: the dataclasses match the .avsc files, and round-trip through fastavro."""

from __future__ import annotations

import dataclasses
import io
import typing
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

import fastavro
import pytest

from schemas.catalog import load_schema, parsed_schema, schema_names
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
from schemas.errors import SchemaError
from schemas.events import (
    EVENT_TYPES,
    NAMED_TYPES,
    AgentCompletion,
    AgentFeedback,
    AgentTask,
    ChannelPointer,
    ChunkEmbedded,
    EditObserved,
    ErasureRecorded,
    Event,
    FeatureUpdate,
    IndexedChunk,
    IndexFileUpdated,
    LakeOffsetRange,
    ModelVersionEvent,
    ReplicaAck,
    Reward,
    RolloutResult,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
    ToolCallObserved,
    TrainingWindow,
)
from schemas.records import decode_time, encode_time, name_uuid, new_event_id, uuid_string

PRIMITIVE_ANNOTATIONS = {
    "string": str,
    "bytes": bytes,
    "int": int,
    "long": int,
    "float": float,
    "double": float,
    "boolean": bool,
}
# Fields whose dataclass default is made per instance rather than mirrored from the schema.
FACTORY_DEFAULTS = {"event_id", "event_time"}


def expected_annotation(avro_type: Any, seen: dict[str, dict[str, Any]]) -> Any:
    """The Python annotation a field of ``avro_type`` must have (see schemas/records.py)."""
    if isinstance(avro_type, list):
        (inner,) = [t for t in avro_type if t != "null"]
        return expected_annotation(inner, seen) | None
    if isinstance(avro_type, str):
        if avro_type in PRIMITIVE_ANNOTATIONS:
            return PRIMITIVE_ANNOTATIONS[avro_type]
        return NAMED_TYPES[avro_type.rpartition(".")[2]]
    kind = avro_type["type"]
    if avro_type.get("logicalType") == "timestamp-millis":
        return datetime
    if kind in PRIMITIVE_ANNOTATIONS:
        return PRIMITIVE_ANNOTATIONS[kind]
    if kind == "array":
        return tuple[expected_annotation(avro_type["items"], seen), ...]  # type: ignore[misc]  # built at run time
    if kind == "map":
        return Mapping[str, expected_annotation(avro_type["values"], seen)]  # type: ignore[misc]  # built at run time
    seen[avro_type["name"]] = avro_type
    return NAMED_TYPES[avro_type["name"]]


def check_record_class(schema: dict[str, Any], cls: type, seen: dict[str, dict[str, Any]]) -> None:
    fields = dataclasses.fields(cls)
    hints = typing.get_type_hints(cls)
    assert [f.name for f in fields] == [f["name"] for f in schema["fields"]], cls.__name__
    for avro_field, dc_field in zip(schema["fields"], fields, strict=True):
        where = f"{cls.__name__}.{dc_field.name}"
        assert hints[dc_field.name] == expected_annotation(avro_field["type"], seen), where
        if "default" in avro_field:
            default = avro_field["default"]  # an Avro array's default is a tuple in Python
            assert dc_field.default == (tuple(default) if isinstance(default, list) else default)
        elif dc_field.name in FACTORY_DEFAULTS and issubclass(cls, Event):
            assert dc_field.default_factory is not dataclasses.MISSING, where
        else:
            assert dc_field.default is dataclasses.MISSING, where
            assert dc_field.default_factory is dataclasses.MISSING, where


def test_every_schema_has_an_event_class() -> None:
    assert set(EVENT_TYPES) == set(schema_names())
    assert all(cls.__name__ == name for name, cls in EVENT_TYPES.items())


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_event_class_matches_its_schema(name: str) -> None:
    seen: dict[str, dict[str, Any]] = {}
    check_record_class(load_schema(name), EVENT_TYPES[name], seen)
    while seen:  # nested records and enums met on the way, each checked against its class
        nested_name, definition = seen.popitem()
        cls = NAMED_TYPES[nested_name]
        if definition["type"] == "enum":
            assert issubclass(cls, StrEnum)
            assert [member.value for member in cls] == definition["symbols"], nested_name
        else:
            check_record_class(definition, cls, seen)


def test_every_named_python_type_appears_in_some_schema() -> None:
    text = " ".join(str(load_schema(name)) for name in schema_names())
    for name in NAMED_TYPES:
        assert f"'name': '{name}'" in text, name


T0 = datetime(2025, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
COMMON: dict[str, Any] = {"event_time": T0, "producer": "test/0"}


def examples() -> list[Event]:
    """One event per schema, with float values exactly representable in float32."""
    return [
        SuggestionOffered(
            **COMMON, suggestion_id="s1", request_id="q1", session_id="sess", user_id="u",
            repo_id="r", language="python", ide="vscode", trigger=SuggestionTrigger.AUTOMATIC,
            model_name="gate", model_version=3, decision=Decision.SHOWN, propensity=0.9,
            context=(0.5, -1.25, 3.0), context_spec="ctx@1", suggestion_chars=42,
            suggestion_lines=2, latency_ms=17, privacy_mode=False, suggestion_text="x = 1\n",
        ),
        SuggestionOutcome(
            **COMMON, suggestion_id="s1", session_id="sess", outcome=Outcome.PARTIAL,
            accepted_chars=10, time_to_decision_ms=1500,
        ),
        EditObserved(
            **COMMON, session_id="sess", suggestion_id="s1", chars_inserted=3, chars_deleted=5,
            accepted_chars_retained=37, elapsed_since_acceptance_ms=60_000,
        ),
        TestRunCompleted(
            **COMMON, session_id="sess", run_id="t1", tests_passed=10, tests_failed=1,
            tests_errored=0, duration_ms=2_345, suggestion_ids=("s1", "s2"),
        ),
        RolloutResult(
            **COMMON, rollout_id="ro1", task_id="task", group_id="g1", model_name="lm",
            model_version=7, prompt_tokens=1000, completion_tokens=250, tool_calls=4,
            tests_passed=3, tests_total=4, reward_components={"tests": 0.75, "format": 1.0},
            behaviour_logprobs=(-0.5, -2.0), duration_ms=90_000,
        ),
        RolloutResult(
            **COMMON, rollout_id="ro2", task_id="ps-1", group_id="g2", model_name="agent-lm",
            model_version=1, prompt_tokens=3, completion_tokens=2, tool_calls=0, tests_passed=5,
            tests_total=5, reward_components={"tests": 1.0}, behaviour_logprobs=(-0.5, -0.25),
            duration_ms=40, environment="program-synthesis", difficulty=2,
            prompt_token_ids=(5, 6, 7), completion_token_ids=(8, 2),
            completion_text="    return reverse(x)\n", temperature=1.0, top_p=1.0,
            max_new_tokens=24, sandbox_status="ok",
        ),
        RolloutResult(
            **COMMON, rollout_id="ro3", task_id="repo-1", group_id="g3", model_name="agent-lm",
            model_version=2, prompt_tokens=5, completion_tokens=3, tool_calls=1, tests_passed=1,
            tests_total=2, reward_components={"tests": 0.5}, behaviour_logprobs=(-0.5, 0.0, -0.25),
            duration_ms=900, environment="repository", difficulty=1, prompt_token_ids=(5, 6),
            completion_token_ids=(8, 9, 2), temperature=1.0, top_p=1.0, turns=2,
            completion_mask=(1, 0, 1),
        ),
        ToolCallObserved(
            **COMMON, rollout_id="ro3", task_id="repo-1", group_id="g3", model_name="agent-lm",
            model_version=2, turn=0, tool="read_file", status="ok", duration_ms=12,
            arguments_bytes=20, observation_bytes=900, truncated=True,
            arguments='{"path":"text.py"}',
        ),
        AgentTask(
            **COMMON, task_id="ps-1", environment="program-synthesis", difficulty=2,
            group_size=8, spec='{"kind":"str","ops":["reverse"],"examples":[],"tests":[]}',
        ),
        AgentCompletion(
            **COMMON, completion_id="cmpl-1:0", request_id="cmpl-1", session_id="sess",
            user_id="u-pseudo", api_key="ide", model_name="agent-lm", model_version=2,
            channel="production", endpoint="completions", choice_index=0, prompt_tokens=3,
            cached_prompt_tokens=0, completion_tokens=2, prompt_token_ids=(1, 2, 3),
            completion_token_ids=(4, 2), behaviour_logprobs=(-0.5, -0.25),
            completion_text="x", temperature=0.0, top_p=1.0, max_tokens=16, stop=("\n",),
            finish_reason="stop", latency_ms=12, first_token_ms=5, privacy_mode=False,
        ),
        AgentFeedback(
            **COMMON, completion_id="cmpl-1:0", session_id="sess",
            reaction=AgentReaction.EDIT_PERSISTED, value=0.8,
        ),
        Reward(
            **COMMON, reward_id=str(uuid.uuid5(uuid.NAMESPACE_URL, "s1/tab@1")),
            source=RewardSource.SUGGESTION, source_id="s1", session_id="sess", model_name="gate",
            model_version=3, decision=Decision.SHOWN, propensity=0.9, context=(0.5, 0.25),
            context_spec="ctx@1", language="python", ide="vscode",
            trigger=SuggestionTrigger.INVOKED, reward=0.75, reward_components={"accept": 0.75},
            reward_fn="tab@1", attributed_at=T0 + timedelta(seconds=30),
        ),
        FeatureUpdate(
            **COMMON, entity_type="user", entity_id="u", feature_name="accept_rate",
            window="1h", value=None, as_of=T0, source_event_count=0,
        ),
        ModelVersionEvent(
            **COMMON, model_name="gate", version=4, parent_version=3,
            event_type=ModelEventType.GATE_FAILED, artifact_uri="file:///models/gate/4/",
            artifact_sha256="ab" * 32,
            training_window=TrainingWindow(
                mds_dataset="rewards", mds_windows=("w-0001", "w-0002"),
                lake_ranges=(LakeOffsetRange(topic="rewards", partition=0, first=0, last=99),),
            ),
            reward_fn="tab@1", metrics={"train_loss": 0.5}, ope_dr_value=0.125,
            ope_dr_lower=0.0625, ope_baseline_value=0.1, ope_confidence_level=0.95,
            ope_effective_sample_size=812.5, reason="lower bound below production",
        ),
        ChannelPointer(
            **COMMON, model_name="gate", channel=Channel.CANARY, version=4,
            traffic_fraction=0.1, artifact_uri="file:///models/gate/4/",
            artifact_sha256="ab" * 32,
        ),
        IndexFileUpdated(
            **COMMON, workspace_id=str(uuid.uuid4()), path="0123456789abcdef0123/" + "a" * 20,
            file_hash="cd" * 32,
            chunks=(IndexedChunk(hash="ef" * 32, start_line=1, end_line=60),),
        ),
        ChunkEmbedded(
            **COMMON, chunk_hash="ef" * 32, embedder_name="code-embedder", embedder_version="3",
            dim=2, vector=b"\x00\x3c\x00\xbc",
        ),
        ErasureRecorded(
            **COMMON, erasure_id="e1", user_id="user:3f1c", rows_removed=12,
            files_rewritten=3, rows_by_topic={"rewards": 8, "dlq.late": 1},
        ),
        ReplicaAck(
            **COMMON, replica_id="replica-2", model_name="gate", version=4,
            state=ReplicaState.REJECTED, serving_version=3, error="sha256 mismatch",
        ),
    ]  # fmt: skip


def test_examples_cover_every_schema() -> None:
    assert {e.SCHEMA_NAME for e in examples()} == set(schema_names())


@pytest.mark.parametrize("event", examples(), ids=lambda e: e.SCHEMA_NAME)
def test_event_round_trips_through_fastavro(event: Event) -> None:
    schema = parsed_schema(event.SCHEMA_NAME)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, event.to_record())
    buffer.seek(0)
    decoded = fastavro.schemaless_reader(buffer, schema, schema)
    assert isinstance(decoded, dict)
    assert type(event).from_record(decoded) == event


def test_from_record_accepts_epoch_millis_and_uuid_objects() -> None:
    event = examples()[1]
    record = event.to_record()
    assert isinstance(record["event_time"], int)
    record["event_id"] = uuid.UUID(event.event_id)
    assert SuggestionOutcome.from_record(record) == event


def test_defaults_make_a_fresh_id_and_a_millisecond_time() -> None:
    first = ReplicaAck(producer="p", replica_id="r", model_name="m", version=1,
                       state=ReplicaState.LOADING)  # fmt: skip
    second = ReplicaAck(producer="p", replica_id="r", model_name="m", version=1,
                        state=ReplicaState.LOADING)  # fmt: skip
    assert first.event_id != second.event_id
    assert uuid.UUID(first.event_id).version == 4
    assert first.event_time.microsecond % 1000 == 0
    assert first.event_time.tzinfo is not None


def test_uuid_strings_are_the_uuid_modules_own() -> None:
    for i in range(2_000):
        name = f"suggestion-{i}:tab@{i % 3}"
        assert name_uuid(uuid.NAMESPACE_URL, name) == str(uuid.uuid5(uuid.NAMESPACE_URL, name))
        data = bytes((i * 37 + j) % 256 for j in range(16))
        assert uuid_string(data, 4) == str(uuid.UUID(bytes=data, version=4))
    ids = {new_event_id() for _ in range(1_000)}
    assert len(ids) == 1_000
    assert {uuid.UUID(i).version for i in ids} == {4}
    assert all(str(uuid.UUID(i)) == i for i in ids)


def test_missing_nullable_field_takes_its_default() -> None:
    record = examples()[-1].to_record()
    del record["error"]
    assert ReplicaAck.from_record(record).error is None


def test_missing_required_field_raises() -> None:
    record = examples()[-1].to_record()
    del record["version"]
    with pytest.raises(SchemaError, match="lacks required field 'version'"):
        ReplicaAck.from_record(record)


def test_unknown_enum_symbol_raises() -> None:
    record = examples()[-1].to_record()
    record["state"] = "EXPLODED"
    with pytest.raises(SchemaError, match=r"ReplicaAck\.state: cannot convert 'EXPLODED'"):
        ReplicaAck.from_record(record)


def test_naive_datetimes_are_refused() -> None:
    ack = examples()[-1]
    assert isinstance(ack, ReplicaAck)
    event = dataclasses.replace(ack, event_time=datetime(2025, 1, 1))
    with pytest.raises(SchemaError, match="timezone-aware"):
        event.to_record()


def test_times_convert_to_epoch_milliseconds_in_any_timezone() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert encode_time(datetime(1970, 1, 1, 2, 0, 0, 1500, tzinfo=plus_two)) == 1
    assert decode_time(1) == datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)
    assert decode_time(T0) is T0


def test_events_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        examples()[0].producer = "other"  # type: ignore[misc]  # proving it is frozen
