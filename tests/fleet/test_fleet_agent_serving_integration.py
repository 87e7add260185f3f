"""Serving the agent model on the real stack: the `openai` client streams a completion from a
replica following the registry; the served event and a feedback event become exactly one
Reward through the joiner; a hot swap mid-traffic fails no request and changes the version in
later events; a canary share of users gets the canary, stably; a client that disconnects
mid-stream still leaves exactly one event."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import openai
import pytest
import torch
import uvicorn

from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine
from fleet.prefix_cache import PrefixCache
from fleet.rollout_worker import AgentPolicy, load_agent_policy
from fleet.subscriber import ModelSubscriber
from flywheel.clients import codec as make_codec
from flywheel.listen import listen
from flywheel.settings import Settings
from model_registry.artifacts import publish_artifact
from model_registry.canary import canary_bucket
from model_registry.registry import ModelRegistry, ModelTopics
from policies.agent_lm import AgentModelConfig, build_model, save_checkpoint
from schemas.enums import AgentReaction
from schemas.events import AgentCompletion, AgentFeedback
from streams.admin import TopicAdmin
from streams.client import TelemetryClient
from streams.gateway.keys import ApiKeyStore
from streams.privacy import Pseudonymizer
from streams.serde import AvroCodec
from streams.topics import COMPLETIONS_TOPIC
from tests.fleet.agent_lm_fixture import tiny_lm
from tests.processors.joiner.test_joiner_worker import Topics, Worker, read

pytestmark = pytest.mark.integration

MODEL = "agent-serve-test"


class Serving:
    """A replica of MODEL (registry on the test's own model topics) behind the OpenAI app,
    served by uvicorn on a free port, its events written to the test's topic copies."""

    def __init__(self, stack: Settings, unique: str, tmp: Path) -> None:
        self.stack, self.tmp = stack, tmp
        self.model_topics = ModelTopics.prefixed(unique)
        self.topics = Topics(unique)
        TopicAdmin(stack.kafka_client_config()).ensure(
            [*self.model_topics.specs(), *self.topics.specs()]
        )
        self.codec: AvroCodec = make_codec(stack)
        self.registry = ModelRegistry(
            stack.kafka_client_config(), self.codec, topics=self.model_topics
        )
        _, self.tokenizer = tiny_lm()
        keys = ApiKeyStore(tmp / "keys.json")
        self.secret = keys.add("ide")
        self.client = TelemetryClient(
            stack.kafka_client_config(), self.codec, tmp / "spool", Pseudonymizer(b"k" * 32),
            topics=self.topics.by_platform,
        )  # fmt: skip
        self.replica: ModelSubscriber[AgentPolicy | None] = ModelSubscriber(
            stack.kafka_client_config(), self.codec, MODEL, "serve-1", load_agent_policy, None,
            topics=self.model_topics, poll_interval_s=0.1,
        )  # fmt: skip
        self.engine = Engine(max_batch_rows=8, prefix_cache=PrefixCache(min_tokens=16))
        app = create_agent_app(
            self.replica, self.engine, self.client.agent_completion, keys=keys,
            producer="serve/test",
        )  # fmt: skip
        sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]})

    def publish(self, version: int, seed: int) -> None:
        torch.manual_seed(seed)
        config = AgentModelConfig(
            hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, vocab_size=300,
            max_positions=512,
        )  # fmt: skip
        source = self.tmp / f"src-{version}"
        save_checkpoint(build_model(config, self.tokenizer), self.tokenizer, source)
        ref = publish_artifact(self.tmp / "models", MODEL, version, source)
        self.registry.register(MODEL, ref, parent_version=version - 1 or None, reward_fn="sft@1")

    def serving(self, version: int, canary: int | None = None) -> None:
        """Wait until the replica serves ``version`` (and the canary ``canary``)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            snap = self.replica.snapshot
            if (
                snap.production
                and snap.production.version == version
                and (canary is None or (snap.canary and snap.canary.version == canary))
            ):
                return
            time.sleep(0.05)
        raise AssertionError(f"the replica did not swap to v{version} (canary {canary})")

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=self.secret, max_retries=0)

    def completions(self, n: int, timeout_s: float = 60) -> list[AgentCompletion]:
        """At least ``n`` served events (fewer on timeout), decoded."""
        got = read(self.stack, self.topics.by_platform[COMPLETIONS_TOPIC], n, timeout_s, False)
        return [
            AgentCompletion.from_record(self.codec.decode(COMPLETIONS_TOPIC, value))
            for value, _ in got
            if isinstance(value, bytes)
        ]


@pytest.fixture
def serving(stack: Settings, unique: str, tmp_path: Path) -> Iterator[Serving]:
    s = Serving(stack, unique, tmp_path)
    s.publish(1, seed=1)
    s.registry.promote(MODEL, 1)
    s.replica.poll_once()
    s.replica.start()
    s.engine.start()
    s.thread.start()
    try:
        yield s
    finally:
        s.server.should_exit = True
        s.thread.join(10)
        s.replica.close()
        s.engine.close()
        s.client.close()


def test_a_streamed_completion_and_its_feedback_become_exactly_one_reward(
    serving: Serving, unique: str, tmp_path: Path
) -> None:
    client = serving.openai()
    stream = client.completions.create(
        model=MODEL, prompt="def f3(x):\n", max_tokens=8, temperature=0, stream=True,
        user="alice", extra_body={"session_id": "sess-1"},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    response_id = chunks[0].id
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    (event,) = serving.completions(1)
    assert event.completion_id == f"{response_id}:0"
    assert event.completion_text == text
    assert event.model_version == 1
    assert event.user_id is not None and event.user_id != "alice"  # pseudonymised at the source
    assert len(event.completion_token_ids or ()) == len(event.behaviour_logprobs or ()) > 0

    # The user accepts it; a later reaction moves the feedback watermark past the deadline.
    now = datetime.now(UTC)
    serving.client.agent_feedback(AgentFeedback(
        producer="ide/test", completion_id=event.completion_id, session_id="sess-1",
        user_id="alice", reaction=AgentReaction.ACCEPTED, event_time=now,
    ))  # fmt: skip
    serving.client.agent_feedback(AgentFeedback(
        producer="ide/test", completion_id="tick:0", session_id="sess-1",
        reaction=AgentReaction.REVERTED, event_time=now + timedelta(seconds=10),
    ))  # fmt: skip
    serving.client.flush()
    joiner = Worker(serving.stack, serving.topics, f"{unique}.joiner", tmp_path / "joiner.log")
    joiner.start()
    try:
        read(serving.stack, serving.topics.rewards, 1, 90)
        time.sleep(3)  # anything doubled would have come by now
        rewards = [r for r, _ in read(serving.stack, serving.topics.rewards, 2, 5)]
    finally:
        joiner.stop()
    assert len(rewards) == 1
    (reward,) = rewards
    assert isinstance(reward, dict)
    assert (reward["source"], reward["source_id"]) == ("COMPLETION", event.completion_id)
    assert (reward["reward"], reward["reward_fn"], reward["model_version"]) == (
        0.5, "agent_use@1", 1,
    )  # fmt: skip


def test_hot_swap_mid_traffic_and_a_stable_canary(serving: Serving) -> None:
    client = serving.openai()
    failures: list[BaseException] = []
    served: list[tuple[str, int]] = []
    stop = threading.Event()

    def traffic() -> None:
        i = 0
        while not stop.is_set():
            try:
                r = client.completions.create(model=MODEL, prompt=f"def f{i}(x):", max_tokens=4,
                                              user=f"user-{i % 7}")  # fmt: skip
                served.append((r.id, int(r.model_extra["flywheel"]["version"])))  # type: ignore[index]
            except BaseException as exc:  # every failure is the finding
                failures.append(exc)
            i += 1

    thread = threading.Thread(target=traffic)
    thread.start()
    time.sleep(1.0)
    serving.publish(2, seed=2)
    serving.registry.promote(MODEL, 2)
    serving.serving(2)
    time.sleep(1.0)
    stop.set()
    thread.join(30)
    assert failures == []
    versions = [v for _, v in served]
    assert versions[0] == 1 and versions[-1] == 2
    assert versions == sorted(versions)  # never back to v1 after the swap
    events = serving.completions(len(served))
    assert Counter(e.model_version for e in events) == Counter(versions)

    # A canary of v3 for 40% of users: each user always gets the same channel.
    serving.publish(3, seed=3)
    serving.registry.start_canary(MODEL, 3, 0.4)
    serving.serving(2, canary=3)
    users = [f"u{i}" for i in range(24)]
    seen: dict[str, set[str]] = {u: set() for u in users}
    for _ in range(2):
        for user in users:
            r = client.completions.create(model=MODEL, prompt="x", max_tokens=2, user=user)
            seen[user].add(r.model_extra["flywheel"]["channel"])  # type: ignore[index]
    assert all(len(channels) == 1 for channels in seen.values())
    expected = {u for u in users if canary_bucket(MODEL, u) < 0.4}
    assert {u for u, c in seen.items() if c == {"canary"}} == expected
    assert 0 < len(expected) < len(users)


def test_a_client_gone_mid_stream_leaves_one_event_and_bad_input_leaves_none(
    serving: Serving,
) -> None:
    body = {"model": MODEL, "prompt": "def f1(x):\n", "max_tokens": 400, "stream": True,
            "temperature": 1.0}  # fmt: skip
    headers = {"Authorization": f"Bearer {serving.secret}"}
    with httpx.stream("POST", f"{serving.url}/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # the first chunk, then the client goes away
    client = serving.openai()
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="context length"):
        client.completions.create(model=MODEL, prompt="x " * 600, max_tokens=8)
    ok = client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    events = serving.completions(2)
    assert len({e.completion_id for e in events}) == 2
    gone = next(e for e in events if e.request_id != ok.id)
    assert gone.finish_reason in ("cancelled", "stop", "length")
    time.sleep(2)
    assert len(serving.completions(3, timeout_s=5)) == 2  # nothing more: no event doubled
