"""Rollout workers on the real stack: groups of trials from a registered agent LM become
RolloutResults, the joiner's group advantages and lake rows exactly once; hot swap, a corrupt
artifact, and tasks from agent.tasks (bad ones dead-lettered)."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from fleet.rollout_worker import (
    AgentPolicy,
    KafkaTaskFeed,
    RolloutWorker,
    load_agent_policy,
    pool_tasks,
    produce_results,
)
from fleet.subscriber import ModelSubscriber
from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from model_registry.artifacts import publish_artifact
from model_registry.registry import (
    ModelRegistry,
    ModelTopics,
)
from policies.agent_lm import AgentModelConfig, build_model, save_checkpoint, train_tokenizer
from policies.agent_sampling import SamplingParams
from processors.lake import LakeSink
from schemas.enums import ReplicaState
from schemas.events import AgentTask, ReplicaAck
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topic_io import EventProducer, read_to_end
from streams.topics import MODEL_ACKS_TOPIC, TopicSpec
from tests.processors.joiner.test_joiner_worker import Topics, Worker, read
from tests.processors.lake.lake_harness import lake_rows

pytestmark = pytest.mark.integration

MODEL = "agent-test"
GROUP = 3  # the joiner Worker's --group-size
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=8)


@dataclasses.dataclass
class Agent:
    stack: Settings
    codec: AvroCodec
    model_topics: ModelTopics
    topics: Topics
    registry: ModelRegistry
    models_root: Path
    tokenizer: Any

    def publish(self, version: int, seed: int) -> Path:
        torch.manual_seed(seed)
        config = AgentModelConfig(hidden_size=32, layers=1, heads=2, kv_heads=1,
                                  intermediate_size=64, vocab_size=300)  # fmt: skip
        source = self.models_root.parent / f"src-{version}"
        save_checkpoint(build_model(config, self.tokenizer), self.tokenizer, source)
        ref = publish_artifact(self.models_root, MODEL, version, source)
        self.registry.register(MODEL, ref, parent_version=version - 1 or None, reward_fn="sft@1")
        self.registry.promote(MODEL, version)
        return ref.path

    def worker(self) -> RolloutWorker:
        subscriber: ModelSubscriber[AgentPolicy | None] = ModelSubscriber(
            self.stack.kafka_client_config(), self.codec, MODEL, "rollout-1", load_agent_policy,
            None, topics=self.model_topics, poll_interval_s=0.1,
        )  # fmt: skip
        return RolloutWorker(subscriber, ENVIRONMENTS, sampling=SAMPLING, producer="test", seed=1)

    def acks(self) -> list[ReplicaAck]:
        records = read_to_end(self.stack.kafka_client_config(), self.model_topics.acks, keep=bool)
        return [
            ReplicaAck.from_record(self.codec.decode(MODEL_ACKS_TOPIC, v)) for _, v in records if v
        ]


@pytest.fixture
def agent(stack: Settings, unique: str, tmp_path: Path) -> Agent:
    model_topics = ModelTopics.prefixed(unique)
    topics = Topics(unique)
    extra = [TopicSpec(f"{unique}.tasks", "task_id", "AgentTask", 2),
             TopicSpec(f"{unique}.dlq.rollouts", "original key", "dead letters", 1)]  # fmt: skip
    TopicAdmin(stack.kafka_client_config()).ensure([*model_topics.specs(), *topics.specs(), *extra])
    codec = make_codec(stack)
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    corpus = [env.reset(t) for t in env.tasks("train", 200, seed=9)]
    registry = ModelRegistry(stack.kafka_client_config(), codec, topics=model_topics)
    return Agent(stack, codec, model_topics, topics, registry, tmp_path / "models",
                 train_tokenizer(corpus, 300))  # fmt: skip


def test_groups_become_rewards_and_lake_rows_once_and_versions_swap(
    agent: Agent, tmp_path: Path, unique: str
) -> None:
    agent.publish(1, seed=1)
    worker = agent.worker()
    producer = EventProducer(agent.stack.kafka_client_config())
    tasks = pool_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, GROUP, seed=4)
    try:
        assert worker.subscriber.poll_once() == 1
        first = worker.run([next(tasks) for _ in range(4)])
        assert len(first) == 4 * GROUP and {r.model_version for r in first} == {1}
        for result in first:
            assert len(result.completion_token_ids) == len(result.behaviour_logprobs) > 0
            assert result.prompt_token_ids and result.sandbox_status
            assert result.temperature == 1.0 and result.max_new_tokens == 8
        produce_results(producer, agent.codec, first, agent.topics.rollouts)

        # Hot swap: v2 is acked READY and later trials carry it.
        agent.publish(2, seed=2)
        assert worker.subscriber.poll_once() == 1
        second = worker.run([next(tasks)])
        assert {r.model_version for r in second} == {2}
        produce_results(producer, agent.codec, second, agent.topics.rollouts)

        # A corrupt artifact is rejected; the worker keeps serving v2.
        corrupt = agent.publish(3, seed=3)
        (corrupt / "model.safetensors").write_bytes(b"not a model")
        worker.subscriber.poll_once()
        assert worker.subscriber.serving_version == 2
        assert {r.model_version for r in worker.run([next(tasks)])} == {2}
        states = Counter((a.version, a.state) for a in agent.acks())
        assert states[(2, ReplicaState.READY)] == 1 and states[(3, ReplicaState.REJECTED)] == 1
    finally:
        worker.subscriber.close()
    results = first + second

    # Read back with the stock Confluent deserializer: every field of the new schema.
    got = read(agent.stack, agent.topics.rollouts, len(results))
    decoded = {str(r["rollout_id"]): r for r, _ in got if isinstance(r, dict)}
    assert set(decoded) == {r.rollout_id for r in results}
    one = results[0]
    assert decoded[one.rollout_id]["completion_token_ids"] == list(one.completion_token_ids)
    assert decoded[one.rollout_id]["environment"] == PROGRAM_SYNTHESIS

    # The joiner: one ROLLOUT Reward per trial, advantages normalised within each group.
    joiner = Worker(agent.stack, agent.topics, f"{unique}.joiner", tmp_path / "joiner.log")
    joiner.start()
    try:
        rewards = [r for r, _ in read(agent.stack, agent.topics.rewards, len(results), 90)]
    finally:
        joiner.stop()
    by_group: dict[str, list[float]] = {}
    for reward in rewards:
        assert isinstance(reward, dict) and reward["reward_fn"] == "grpo@1"
        by_group.setdefault(str(reward["group_id"]), []).append(float(reward["advantage"]))
    assert {str(r["source_id"]) for r in rewards if isinstance(r, dict)} == decoded.keys()
    assert sorted(len(a) for a in by_group.values()) == [GROUP] * 5
    assert all(abs(sum(a)) < 1e-6 for a in by_group.values())

    # The lake: every RolloutResult exactly once.
    lake = tmp_path / "lake"
    LakeSink(
        agent.stack.kafka_client_config(), agent.codec, lake, [agent.topics.rollouts],
        group_id=f"{unique}.sink", decode_as={agent.topics.rollouts: "rollouts.results"},
        dlq_topic=f"{unique}.dlq.rollouts",
    ).run(threading.Event(), until_caught_up=True)  # fmt: skip
    rows = lake_rows(lake, agent.topics.rollouts, "rollout_id, len(completion_token_ids)")
    assert sorted(r[0] for r in rows) == sorted(decoded)
    assert all(r[1] > 0 for r in rows)


def test_tasks_from_the_topic_run_with_stable_ids_and_bad_ones_are_dead_lettered(
    agent: Agent, unique: str
) -> None:
    agent.publish(1, seed=1)
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    producer = EventProducer(agent.stack.kafka_client_config())
    tasks_topic, dlq = f"{unique}.tasks", f"{unique}.dlq.rollouts"
    for task in env.tasks("train", 2, seed=11):
        event = AgentTask(producer="test", task_id=task.task_id, environment=task.environment,
                          difficulty=task.difficulty, group_size=2, spec=task.spec)  # fmt: skip
        producer.send(tasks_topic, task.task_id, agent.codec.encode_event("agent.tasks", event))
    unknown = AgentTask(producer="test", task_id="t-x", environment="no-such-env", difficulty=1,
                        group_size=2, spec="{}")  # fmt: skip
    producer.send(tasks_topic, "t-x", agent.codec.encode_event("agent.tasks", unknown))
    held = env.tasks("eval", 1)[0]  # the release check's own question: never a training trial
    evaluated = AgentTask(producer="test", task_id=held.task_id, environment=held.environment,
                          difficulty=held.difficulty, group_size=2, spec=held.spec)  # fmt: skip
    producer.send(tasks_topic, held.task_id, agent.codec.encode_event("agent.tasks", evaluated))
    producer.send(tasks_topic, "t-y", b"garbage!")
    producer.flush()
    worker = agent.worker()
    feed = KafkaTaskFeed(
        agent.stack.kafka_client_config(), agent.codec, ENVIRONMENTS, group=f"{unique}.workers",
        default_group_size=8, topic=tasks_topic, dlq=dlq,
    )  # fmt: skip
    try:
        worker.subscriber.poll_once()
        requests = []
        for _ in range(20):
            requests += feed.poll(10, timeout_s=1.0)
            if len(requests) == 2 and feed.dead_lettered == 3:
                break
        assert len(requests) == 2 and feed.dead_lettered == 3
        results = worker.run(requests)
        assert len(results) == 4  # each task's own group_size
        again = worker.run(requests)  # a redelivered task: the same group and rollout ids
        assert [r.rollout_id for r in again] == [r.rollout_id for r in results]
        feed.commit()
    finally:
        worker.subscriber.close()
        feed.close()
    letters = read(agent.stack, dlq, 3, avro=False)
    causes = sorted(h["flywheel.cause"].decode() for _, h in letters)
    assert causes == ["bad_magic", "held_out_task", "invalid_task"]
