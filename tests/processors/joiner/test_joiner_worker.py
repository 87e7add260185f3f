"""The joiner worker end to end: a subprocess on the real broker, fed with SDK-encoded events."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flywheel.settings import Settings
from processors.rewards.attribution import reward_id
from schemas.enums import Decision, Outcome
from schemas.events import (
    EditObserved,
    Event,
    RolloutResult,
    SuggestionOutcome,
    TestRunCompleted,
)
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topics import COMPLETION_TOPICS, ROLLOUTS_TOPIC, TELEMETRY_TOPICS, TopicSpec
from tests.sample_events import PRODUCER, offered

E = TypeVar("E", bound=Event)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TELEMETRY = TELEMETRY_TOPICS
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class Topics:
    """This test's own copies of the joiner's topics."""

    def __init__(self, prefix: str) -> None:
        self.telemetry = {f"{prefix}.{t}": t for t in TELEMETRY}
        self.served = {f"{prefix}.{t}": t for t in COMPLETION_TOPICS}
        self.by_platform = {t: f"{prefix}.{t}" for t in (*TELEMETRY, *self.served.values())}
        self.rollouts = f"{prefix}.rollouts"
        self.rewards = f"{prefix}.rewards"
        self.dlq_late = f"{prefix}.dlq.late"
        self.dlq_joiner = f"{prefix}.dlq.joiner"

    def specs(self) -> list[TopicSpec]:
        four = [*self.telemetry, *self.served, self.rollouts, self.rewards]
        return [TopicSpec(n, "session_id", "test", 4) for n in four] + [
            TopicSpec(n, "original key", "dead letters", 1)
            for n in (self.dlq_late, self.dlq_joiner)
        ]

    def args(self) -> list[str]:
        out: list[str] = []
        for name, platform in {**self.telemetry, **self.served}.items():
            out += ["--topic", f"{name}={platform}"]
        return [
            *out, "--topic", f"{self.rollouts}={ROLLOUTS_TOPIC}", "--rewards-topic", self.rewards,
            "--late-dlq-topic", self.dlq_late, "--dlq-topic", self.dlq_joiner,
        ]  # fmt: skip


@pytest.fixture
def topics(stack: Settings, unique: str) -> Topics:
    made = Topics(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(made.specs())
    return made


class Worker:
    """`python -m flywheel process` with tiny windows: deadline = offer (completion) + 2 s,
    lateness 1 s."""

    def __init__(self, settings: Settings, topics: Topics, app_id: str, log: Path) -> None:
        self.cmd = [
            sys.executable, "-m", "flywheel", "process", *topics.args(), "--group", app_id,
            "--outcome-window", "2s", "--edits-window", "2s", "--tests-window", "2s",
            "--feedback-window", "2s",
            "--allowed-lateness", "1s", "--group-size", "3", "--session-timeout", "6s",
            "--status-every", "1s", "--once-idle", "60s", "--idle-after", "0",
        ]  # fmt: skip
        self.logs = log
        self.starts = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        """The log of the latest start."""
        return self.logs.with_suffix(f".{self.starts}.log")

    def start(self) -> None:
        self.starts += 1
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=log, stderr=log)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def worker(stack: Settings, topics: Topics, unique: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(stack, topics, f"{unique}.joiner", tmp_path / "worker.log")
    yield w
    w.stop()
    print(w.log.read_text(errors="replace")[-4000:])


def produce(settings: Settings, topics: Topics, events: Sequence[Event]) -> None:
    codec = AvroCodec.for_url(settings.registry_url)
    producer = Producer({**settings.kafka_client_config(), "partitioner": "murmur2_random"})
    platform = {
        "SuggestionOffered": "telemetry.suggestions",
        "SuggestionOutcome": "telemetry.outcomes",
        "EditObserved": "telemetry.edits",
        "TestRunCompleted": "telemetry.tests",
    }
    for event in events:
        topic = platform[event.SCHEMA_NAME]
        value = codec.encode(topic, event.to_record())
        session = str(getattr(event, "session_id", ""))
        producer.produce(topics.by_platform[topic], value, key=session.encode())
    assert producer.flush(10) == 0


def read(
    settings: Settings, topic: str, count: int, timeout_s: float = 40, avro: bool = True
) -> list[tuple[dict[str, Any] | bytes, dict[str, bytes]]]:
    """At least `count` records of `topic` from the beginning (fewer on timeout)."""
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": settings.registry_url}))
    consumer = Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": f"read-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[dict[str, Any] | bytes, dict[str, bytes]]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            value = msg.value() or b""
            ctx = SerializationContext(topic, MessageField.VALUE)
            got.append((deserialize(value, ctx) if avro else value, _headers(msg)))
    finally:
        consumer.close()
    return got


def read_decoded(
    settings: Settings,
    codec: AvroCodec,
    topic: str,
    platform_topic: str,
    event_type: type[E],
    count: int,
    timeout_s: float = 40,
) -> list[E]:
    """At least `count` events of `topic` (a test's copy of `platform_topic`, whose schema
    decodes it) from the beginning, as `event_type` (fewer on timeout)."""
    return [
        event_type.from_record(codec.decode(platform_topic, value))
        for value, _ in read(settings, topic, count, timeout_s, avro=False)
        if isinstance(value, bytes)
    ]


def read_after_restart(settings: Settings, topic: str, count: int) -> list[Any]:
    """Every one of `count` Avro records, however slow a restarted worker is (recovery alone
    takes 10 s or more), then one more read from the start that waits a while for a record
    committed twice."""
    read(settings, topic, count, timeout_s=180)
    return read(settings, topic, count + 1, timeout_s=15)


def assert_rewards_once(got: list[Any], expected: dict[str, float]) -> None:
    """The Rewards read are the expected set (reward_id -> value), none committed twice."""
    ids = [str(r["reward_id"]) for r, _ in got if isinstance(r, dict)]
    assert rewards_by_id(got) == expected
    assert len(ids) == len(set(ids)), "a Reward was committed twice"


def _headers(msg: Any) -> dict[str, bytes]:  # confluent's stubs type header keys loosely
    return {str(k): v for k, v in msg.headers() or []}


def session_events(session: str, base_s: float = 0) -> tuple[list[Event], dict[str, float]]:
    """Four suggestions of one session from T0 + `base_s`, and their tab@1 rewards by
    deterministic reward id."""
    t0 = T0 + timedelta(seconds=base_s)
    accepted = offered(session, event_time=t0)
    rejected = offered(session, event_time=t0 + timedelta(milliseconds=100))
    ignored = offered(session, event_time=t0 + timedelta(milliseconds=200))
    suppressed = offered(
        session, event_time=t0 + timedelta(milliseconds=300), decision=Decision.SUPPRESSED
    )

    def outcome(sid: str, what: Outcome, after_ms: int) -> SuggestionOutcome:
        return SuggestionOutcome(
            producer=PRODUCER, event_time=t0 + timedelta(milliseconds=after_ms),
            suggestion_id=sid, session_id=session, outcome=what,
            accepted_chars=42 if what is Outcome.ACCEPTED else 0, time_to_decision_ms=500,
        )  # fmt: skip

    events: list[Event] = [
        accepted,
        rejected,
        ignored,
        suppressed,
        outcome(accepted.suggestion_id, Outcome.ACCEPTED, 500),
        outcome(rejected.suggestion_id, Outcome.REJECTED, 600),
        EditObserved(
            producer=PRODUCER, event_time=t0 + timedelta(milliseconds=900), session_id=session,
            suggestion_id=accepted.suggestion_id, chars_inserted=1, chars_deleted=0,
            accepted_chars_retained=42, elapsed_since_acceptance_ms=400,
        ),
        TestRunCompleted(
            producer=PRODUCER, event_time=t0 + timedelta(milliseconds=1000), session_id=session,
            run_id="run-1", tests_passed=3, tests_failed=0, tests_errored=0, duration_ms=50,
            suggestion_ids=(accepted.suggestion_id, rejected.suggestion_id),
        ),
    ]  # fmt: skip
    expected = {
        reward_id(accepted.suggestion_id, "tab@1"): 0.75,
        reward_id(rejected.suggestion_id, "tab@1"): -0.25,
        reward_id(ignored.suggestion_id, "tab@1"): -0.25,
        reward_id(suppressed.suggestion_id, "tab@1"): 0.0,
    }
    return events, expected


def sessions(n: int) -> tuple[list[Event], dict[str, float]]:
    """`session_events` of sessions s-0 .. s-<n-1>, all from T0: their events and Rewards."""
    events: list[Event] = []
    expected: dict[str, float] = {}
    for i in range(n):
        evs, exp = session_events(f"s-{i}")
        events += evs
        expected.update(exp)
    return events, expected


def tick(session: str, after_s: float = 60) -> SuggestionOutcome:
    """An outcome (of no known offer) far in the future on the session's partition: moves the
    outcomes topic's watermark on; with `--idle-after 0` the other inputs do not hold it back."""
    return SuggestionOutcome(
        producer=PRODUCER, event_time=T0 + timedelta(seconds=after_s),
        suggestion_id=str(uuid.uuid4()), session_id=session, outcome=Outcome.REJECTED,
        accepted_chars=0, time_to_decision_ms=1,
    )  # fmt: skip


def wait_started(worker: Worker, timeout_s: float = 45) -> None:
    """Until the worker prints its first status line (its agents are running)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.proc is not None
        if worker.proc.poll() is not None:
            pytest.fail(f"worker exited: {worker.log.read_text(errors='replace')[-3000:]}")
        if "process: " in worker.log.read_text(errors="replace"):
            return
        time.sleep(0.3)
    pytest.fail("worker did not start in time")


def rewards_by_id(
    records: list[tuple[dict[str, Any] | bytes, dict[str, bytes]]],
) -> dict[str, float]:
    out: dict[str, float] = {}
    for record, _headers in records:
        assert isinstance(record, dict)
        out[str(record["reward_id"])] = float(record["reward"])
    return out


def test_joiner_rewards_each_suggestion_once_and_sends_late_events_to_dlq(
    stack: Settings, topics: Topics, worker: Worker
) -> None:
    events, expected = session_events("s-a")
    worker.start()
    wait_started(worker)
    produce(stack, topics, events)
    time.sleep(2)  # telemetry topics are read in parallel: let the in-window events land first
    produce(stack, topics, [tick("s-a")])

    got = read(stack, topics.rewards, len(expected))
    assert rewards_by_id(got) == expected
    for record, _ in got:
        assert isinstance(record, dict)
        assert record["reward_fn"] == "tab@1"
        assert record["session_id"] == "s-a"
        assert record["source"] == "SUGGESTION"

    late = SuggestionOutcome(
        producer=PRODUCER, event_time=T0 + timedelta(milliseconds=700),
        suggestion_id=str(uuid.uuid4()), session_id="s-a", outcome=Outcome.ACCEPTED,
        accepted_chars=1, time_to_decision_ms=1,
    )  # fmt: skip
    produce(stack, topics, [late])
    letters = read(stack, topics.dlq_late, 1, avro=False)
    assert len(letters) == 1
    _, headers = letters[0]
    assert headers["flywheel.cause"] == b"late"
    assert headers["flywheel.stage"] == b"joiner"
    assert headers["flywheel.topic"] == topics.by_platform["telemetry.outcomes"].encode()
    assert b"allowed lateness" in headers["flywheel.error"]
    # nothing else was emitted: the late outcome did not produce a second reward
    assert rewards_by_id(read(stack, topics.rewards, len(expected) + 1, timeout_s=3)) == expected
    assert worker.stop() == 0


def test_suggestions_due_once_an_input_goes_idle_are_rewarded_without_another_record(
    stack: Settings, topics: Topics, worker: Worker
) -> None:
    """With `--idle-after 3s`, the session's events and the tick arrive while every input is
    still moving, so no batch can attribute them; nothing of that partition comes after. The
    worker's attribution tick emits (and commits) them once the inputs have gone idle."""
    worker.cmd[worker.cmd.index("--idle-after") + 1] = "3s"
    events, expected = session_events("s-a")
    worker.start()
    wait_started(worker)
    produce(stack, topics, [*events, tick("s-a")])
    assert rewards_by_id(read(stack, topics.rewards, len(expected))) == expected
    assert_rewards_once(read(stack, topics.rewards, len(expected) + 1, timeout_s=3), expected)
    assert worker.stop() == 0


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_joiner_resumes_after_sigkill_with_the_same_rewards(
    stack: Settings, topics: Topics, worker: Worker, guarantee: str
) -> None:
    worker.cmd += ["--guarantee", guarantee]
    first, expected_first = session_events("s-b")
    # s-c's suggestions are due after tick("s-b"), so they are attributed by the second worker
    second, expected_second = session_events("s-c", base_s=120)
    worker.start()
    wait_started(worker)
    produce(stack, topics, first)
    produce(stack, topics, second[:4])  # s-c: the offers before the crash, the rest after
    time.sleep(2)
    produce(stack, topics, [tick("s-b")])
    assert rewards_by_id(read(stack, topics.rewards, 4)) == expected_first
    worker.kill()  # mid-stream: offsets are likely not committed yet, state is in the changelog

    worker.start()
    wait_started(worker)
    produce(stack, topics, second[4:])
    time.sleep(2)
    produce(stack, topics, [tick("s-c", after_s=200)])
    expected = {**expected_first, **expected_second}
    got = read(stack, topics.rewards, len(expected), timeout_s=60)
    assert rewards_by_id(got) == expected  # deduped by reward_id: a crash-free run's set


def rollout(group: str, rollout_id: str, score: float) -> RolloutResult:
    return RolloutResult(
        producer=PRODUCER, event_time=T0, rollout_id=rollout_id, task_id="t-1", group_id=group,
        model_name="agent", model_version=3, prompt_tokens=10, completion_tokens=5, tool_calls=1,
        tests_passed=1, tests_total=2, reward_components={"tests": score},
        behaviour_logprobs=(-0.5,), duration_ms=100,
    )  # fmt: skip


def test_joiner_emits_group_advantages_and_dead_letters_undecodable_records(
    stack: Settings, topics: Topics, worker: Worker
) -> None:
    worker.start()
    wait_started(worker)
    codec = AvroCodec.for_url(stack.registry_url)
    producer = Producer({**stack.kafka_client_config(), "partitioner": "murmur2_random"})
    for i, score in enumerate((0.0, 0.5, 1.0)):
        value = codec.encode("rollouts.results", rollout("g-1", f"ro-{i}", score).to_record())
        producer.produce(topics.rollouts, value, key=b"g-1")
    producer.produce(topics.by_platform["telemetry.outcomes"], b"not avro", key=b"s-x")
    assert producer.flush(10) == 0

    got = read(stack, topics.rewards, 3)
    records = [r for r, _ in got if isinstance(r, dict)]
    assert len(records) == 3
    assert {r["source"] for r in records} == {"ROLLOUT"}
    assert {r["group_id"] for r in records} == {"g-1"}
    assert sum(r["advantage"] for r in records) == pytest.approx(0.0, abs=1e-6)
    by_score = sorted(records, key=lambda r: r["reward"])
    assert by_score[0]["advantage"] < 0 < by_score[2]["advantage"]

    letters = read(stack, topics.dlq_joiner, 1, avro=False)
    assert len(letters) == 1
    body, headers = letters[0]
    assert body == b"not avro"
    assert headers["flywheel.cause"] == b"bad_magic"
    assert headers["flywheel.stage"] == b"joiner"
    assert worker.stop() == 0
