"""The repository loop on the real stack: a rollout worker runs episodes of tasks from
``agent.tasks`` (an eval task dead-lettered), a crash before the commit redelivers them, the
joiner rewards each episode once, the lake sink lands the episodes, their Rewards and tool calls
(each once through the analysts' views), and one learner cycle trains on them with targets only
on the tokens the policy generated.

A tiny warm-up rarely fixes a repository, so every trial of a group would score the same and
carry no advantage (the windows drop such rows). Each group therefore gets one trial more: the
environment's expert played through the episode with production's log-probs as behaviour, as
the program-synthesis loop test does: the worker's episodes then train with a nonzero
advantage."""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from confluent_kafka import Consumer, TopicPartition

from analytics import Catalog
from environments import ENVIRONMENTS, REPOSITORY
from environments.episode_runner import expert_trace
from environments.episodes import EpisodeLimits, MultiTurnEnvironment
from environments.repository.environment import RepositoryEnvironment
from fleet.episode_events import episode_result, tool_call_events
from fleet.rollout_worker import (
    AgentPolicy,
    KafkaTaskFeed,
    RolloutBatch,
    RolloutWorker,
    TaskRequest,
    load_agent_policy,
    produce_results,
    rollout_id,
)
from fleet.subscriber import ModelSubscriber
from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from learner.continuous import ContinuousLearner, LearnerPaths
from learner.engine.causal_lm import next_token_logprobs
from learner.engine.trainer import TrainerConfig
from learner.eval_suite import EvalConfig
from learner.recipes.agent_rl.eval_check import EvalCheckConfig
from learner.recipes.agent_rl.recipe import (
    AGENT_TRAINING,
    AgentLoopConfig,
    AgentRLConfig,
    AgentRLRecipe,
)
from learner.recipes.agent_rl.windows import TokenWindowConfig
from learner.recipes.agent_sft.recipe import AgentSFTConfig, CorpusConfig, run_sft
from model_registry.registry import ModelRegistry, ModelTopics
from policies.agent_lm import AgentModelConfig
from policies.agent_sampling import SamplingParams
from processors.lake import LakeSink
from schemas.enums import ModelEventType
from schemas.events import AgentTask
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topic_io import EventProducer
from streams.topics import REWARDS_TOPIC, ROLLOUTS_TOPIC, TOOL_CALLS_TOPIC, TopicSpec
from tests.learner.recipes.agent_rl.agent_lake import adopt_topic, window_rows
from tests.processors.joiner.test_joiner_worker import Topics, Worker, read

pytestmark = pytest.mark.integration

MODEL = "agent-repo-test"
TASKS, SAMPLED = 3, 2  # level-1 tasks; the worker's episodes per task (+1 expert: the joiner's 3)
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=40)
LIMITS = EpisodeLimits(max_turns=3, max_tokens=512)  # the worker's
EXPERT = EpisodeLimits(max_turns=8, max_tokens=512)  # room for the expert's 5 or 6 calls
EVAL = EvalConfig(tasks=3, max_new_tokens=32, max_turns=3, max_context=512, extra_tasks=0)


def _warm_up(registry: ModelRegistry, root: Path) -> None:
    """A tiny supervised warm-up on expert episodes (the chat tokenizer with its roles, the
    model): production's v1."""
    config = AgentSFTConfig(
        model_name=MODEL, environment=REPOSITORY,
        model=AgentModelConfig(vocab_size=400, hidden_size=32, layers=2, heads=2, kv_heads=1,
                               intermediate_size=64, max_positions=512),
        corpus=CorpusConfig(tasks=60, seq_len=512, rows_per_sample=4),
        train=TrainerConfig(batch_size=2, duration="20ba", checkpoint_interval="20ba", lr=3e-3,
                            grad_clip_norm=1.0, loader="streaming", device="cpu"),
        eval=EVAL,
    )  # fmt: skip
    result = run_sft(config, root / "sft", registry=registry, models_root=root / "models",
                     log=lambda _: None, use_shipped=False)  # fmt: skip
    assert result.version == 1


def _expert(policy: AgentPolicy, request: TaskRequest) -> RolloutBatch:
    """The expert's episode of ``request`` as one more trial of its group (index SAMPLED), its
    generated tokens' behaviour log-probs production's."""
    env = ENVIRONMENTS.get_any(REPOSITORY)
    assert isinstance(env, MultiTurnEnvironment)
    trace = expert_trace(policy.tokenizer, env, request.task, EXPERT)
    assert trace.ended == "submitted" and trace.score.passed
    ids = torch.tensor([[*trace.prompt_ids, *trace.completion_ids]])
    with torch.no_grad():
        mu = next_token_logprobs(policy.model, ids, torch.tensor([ids.shape[1]]))[0]
    start = len(trace.prompt_ids) - 1  # index t scores position t + 1
    logprobs = tuple(float(mu[start + i]) if m else 0.0 for i, m in enumerate(trace.mask))
    trace = dataclasses.replace(trace, logprobs=logprobs)
    result = episode_result(
        trace, producer="test", rollout_id=rollout_id(request.group_id, SAMPLED),
        group_id=request.group_id, model_name=MODEL, model_version=1, sampling=SAMPLING,
    )  # fmt: skip
    return RolloutBatch([result], tool_call_events(trace, result))


@dataclasses.dataclass
class Loop:
    """This test's topics, registry and clients."""

    stack: Settings
    codec: AvroCodec
    topics: Topics  # the joiner's (rollouts, rewards)
    model_topics: ModelTopics
    registry: ModelRegistry
    tasks: str
    tool_calls: str
    dlq: str
    workers: str  # the rollout workers' consumer group

    def feed(self) -> KafkaTaskFeed:
        """A worker's task feed: a new member of the workers' group."""
        return KafkaTaskFeed(
            self.stack.kafka_client_config(), self.codec, ENVIRONMENTS, group=self.workers,
            default_group_size=8, topic=self.tasks, dlq=self.dlq,
        )  # fmt: skip

    def worker(self) -> RolloutWorker:
        subscriber: ModelSubscriber[AgentPolicy | None] = ModelSubscriber(
            self.stack.kafka_client_config(), self.codec, MODEL, "rollout-1", load_agent_policy,
            None, topics=self.model_topics, poll_interval_s=0.1,
        )  # fmt: skip
        return RolloutWorker(subscriber, ENVIRONMENTS, sampling=SAMPLING, producer="test",
                             seed=1, limits=LIMITS)  # fmt: skip

    def produce(self, producer: EventProducer, batch: RolloutBatch) -> None:
        produce_results(producer, self.codec, batch.results, self.topics.rollouts,
                        tool_calls=batch.tool_calls, tool_calls_topic=self.tool_calls)  # fmt: skip


@pytest.fixture
def loop(stack: Settings, unique: str) -> Loop:
    topics, model_topics = Topics(unique), ModelTopics.prefixed(unique)
    codec = make_codec(stack)
    made = Loop(stack, codec, topics, model_topics,
                ModelRegistry(stack.kafka_client_config(), codec, topics=model_topics),
                f"{unique}.tasks", f"{unique}.tool_calls", f"{unique}.dlq.rollouts",
                f"{unique}.workers")  # fmt: skip
    TopicAdmin(stack.kafka_client_config()).ensure([
        *model_topics.specs(), *topics.specs(),
        TopicSpec(made.tasks, "task_id", "AgentTask", 2),
        TopicSpec(made.tool_calls, "group_id", "ToolCallObserved", 2),
        TopicSpec(made.dlq, "original key", "dead letters", 1),
        TopicSpec(f"{unique}.dlq.sink", "original key", "dead letters", 1),
    ])  # fmt: skip
    return made


@pytest.fixture
def joiner(loop: Loop, unique: str, tmp_path: Path) -> Iterator[Worker]:
    """The joiner's process (`flywheel process`, group size 3), started by the test."""
    worker = Worker(loop.stack, loop.topics, f"{unique}.joiner", tmp_path / "joiner.log")
    worker.cmd[worker.cmd.index("--once-idle") + 1] = "600s"  # idle while episodes run
    yield worker
    worker.stop()
    print(worker.log.read_text(errors="replace")[-3000:])


def _send_tasks(s: Loop) -> list[str]:
    """Level-1 training tasks (group_size SAMPLED) and one eval task on the tasks topic; the
    training tasks' ids."""
    env = RepositoryEnvironment()
    rng = random.Random(7)
    tasks = [env.task(rng, 1) for _ in range(TASKS)]
    held = env.tasks("eval", 1)[0]  # the release check's own question
    producer = EventProducer(s.stack.kafka_client_config())
    for task in [*tasks, held]:
        event = AgentTask(producer="test", task_id=task.task_id, environment=task.environment,
                          difficulty=task.difficulty, group_size=SAMPLED,
                          spec=task.spec)  # fmt: skip
        producer.send(s.tasks, task.task_id, s.codec.encode_event("agent.tasks", event))
    producer.flush()
    return [t.task_id for t in tasks]


def _poll(feed: KafkaTaskFeed) -> list[TaskRequest]:
    requests: list[TaskRequest] = []
    for _ in range(30):
        requests += feed.poll(10, timeout_s=1.0)
        if len(requests) == TASKS and feed.dead_lettered == 1:
            break
    assert len(requests) == TASKS and feed.dead_lettered == 1
    return requests


def _committed_to_the_end(stack: Settings, group: str, topic: str) -> bool:
    """Whether ``group`` committed every partition of ``topic`` to its end."""
    consumer = Consumer({**stack.kafka_client_config(), "group.id": group})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in committed]
        return [tp.offset for tp in committed] == ends
    finally:
        consumer.close()


def test_episodes_from_the_task_topic_are_rewarded_landed_once_and_trained_on(
    loop: Loop, joiner: Worker, unique: str, tmp_path: Path
) -> None:
    _warm_up(loop.registry, tmp_path)
    task_ids = _send_tasks(loop)
    joiner.start()  # it reads from the start; its start-up overlaps the episodes
    worker, producer = loop.worker(), EventProducer(loop.stack.kafka_client_config())
    try:
        assert worker.subscriber.poll_once() == 1
        # 1. Episodes of the polled tasks, produced; the worker "crashes" before the commit.
        feed = loop.feed()
        first = _poll(feed)
        assert sorted(r.task.task_id for r in first) == sorted(task_ids)
        delivered = worker.run_batch(first)
        feed.close()  # no commit
        assert len(delivered.results) == TASKS * SAMPLED
        assert len(delivered.tool_calls) == sum(r.turns for r in delivered.results) > 0
        loop.produce(producer, delivered)
        policy = worker.subscriber.route(first[0].task.task_id).model
        assert policy is not None
        experts = [_expert(policy, request) for request in first]
        for expert in experts:  # each group's expert trial completes it (the joiner's 3)
            loop.produce(producer, expert)
        # 2. Redelivered to the group's next consumer: the same groups, the same rollout ids.
        feed = loop.feed()
        again = _poll(feed)
        assert {r.group_id for r in again} == {r.group_id for r in first}
        redelivered = worker.run_batch(again)
        assert {r.rollout_id for r in redelivered.results} == {
            r.rollout_id for r in delivered.results
        }
        loop.produce(producer, redelivered)
        feed.commit()
        feed.close()
    finally:
        worker.subscriber.close()
    assert _committed_to_the_end(loop.stack, loop.workers, loop.tasks)
    letters = read(loop.stack, loop.dlq, 2, avro=False)
    assert [h["flywheel.cause"].decode() for _, h in letters] == ["held_out_task"] * 2

    # The joiner: one grpo@1 Reward per trial of the first delivery, each group's summing to 0.
    trials = TASKS * (SAMPLED + 1)
    rewards = [r for r, _ in read(loop.stack, loop.topics.rewards, trials, 120)]
    late = read(loop.stack, loop.topics.dlq_late, TASKS * SAMPLED, 30, avro=False)
    assert len(rewards) == trials
    assert len(late) == TASKS * SAMPLED  # the redelivered episodes: their groups were complete
    by_group: dict[str, list[float]] = {}
    for reward in rewards:
        assert isinstance(reward, dict) and reward["reward_fn"] == "grpo@1"
        by_group.setdefault(str(reward["group_id"]), []).append(float(reward["advantage"]))
    assert sorted(len(a) for a in by_group.values()) == [SAMPLED + 1] * TASKS
    assert all(abs(sum(a)) < 1e-4 and max(a) > 0 for a in by_group.values())

    # The lake: both deliveries land; the views hold each episode, Reward and tool call once.
    lake = tmp_path / "lake"
    sunk = {loop.topics.rollouts: ROLLOUTS_TOPIC, loop.topics.rewards: REWARDS_TOPIC,
            loop.tool_calls: TOOL_CALLS_TOPIC}  # fmt: skip
    LakeSink(
        loop.stack.kafka_client_config(), loop.codec, lake, list(sunk), group_id=f"{unique}.sink",
        decode_as=sunk, dlq_topic=f"{unique}.dlq.sink",
    ).run(threading.Event(), until_caught_up=True)  # fmt: skip
    for name, platform in sunk.items():
        adopt_topic(lake, name, platform)
    first_ids = {r.rollout_id: r for r in delivered.results}
    with Catalog(lake).connect() as con:
        raw = con.sql(f"select count(*) from read_parquet('{lake}/{ROLLOUTS_TOPIC}/**/*.parquet')")
        assert raw.fetchall() == [(trials + TASKS * SAMPLED,)]
        episodes = con.sql(
            "select rollout_id, turns, tool_calls, completion_mask, completion_token_ids, "
            "prompt_token_ids from rollouts_results"
        ).fetchall()
        assert len(episodes) == trials and len({e[0] for e in episodes}) == trials
        assert any(0 in mask for _, _, _, mask, _, _ in episodes)  # tool observations
        for rid, turns, _, mask, completion, _ in episodes:
            assert len(mask) == len(completion) and 1 in mask
            if rid in first_ids:  # the first delivery's copy is the one kept
                assert list(first_ids[rid].completion_token_ids) == completion
                assert turns == first_ids[rid].turns
        calls = con.sql(
            "select rollout_id, list(turn order by turn) from agent_tool_calls group by 1"
        ).fetchall()
        # One call per turn. A turn's event id derives from its rollout and number: a
        # redelivered episode that ran more turns than the kept one adds its later turns.
        turns = {e.results[0].rollout_id: e.results[0].turns for e in experts}
        for r in redelivered.results:
            turns[r.rollout_id] = max(r.turns, first_ids[r.rollout_id].turns)
        assert dict(calls) == {rid: list(range(1, n + 1)) for rid, n in turns.items()}
        rewards_raw = f"read_parquet('{lake}/{REWARDS_TOPIC}/**/*.parquet')"
        assert con.sql(
            f"select count(*), count(distinct source_id) from {rewards_raw}"
        ).fetchall() == [(trials, trials)]  # the joiner emitted each once

    # One learner cycle on them: targets only where the episode's mask is 1.
    paths = LearnerPaths(lake, tmp_path / "mds", tmp_path / "models", tmp_path / "runs")
    config = AgentRLConfig(
        model_name=MODEL, environment=REPOSITORY,
        windows=TokenWindowConfig(seq_len=512, rows_per_sample=4, served_weight=0.0),
        train=dataclasses.replace(AGENT_TRAINING, batch_size=1, duration="2ba",
                                  checkpoint_interval="2ba", device="cpu"),
        eval=EVAL,
        # a lift no pass rate has: the check refuses, so the cycle ends without a canary
        release_check=EvalCheckConfig(min_lift=1.0),
        loop=AgentLoopConfig(min_new_rows=1, poll_s=0.5),
    )  # fmt: skip
    learner = ContinuousLearner(
        AgentRLRecipe(config, paths, log=lambda _: None), paths, loop.stack.kafka_client_config(),
        loop.codec, registry=loop.registry, rewards_topic=loop.topics.rewards,
    )  # fmt: skip
    results = learner.run(threading.Event(), max_versions=2)  # v1 counts: the warm-up
    assert [(r.version, r.decision) for r in results] == [(2, ModelEventType.GATE_FAILED)]
    state = loop.registry.versions(MODEL)[2]
    metrics = state.events[-1].metrics
    [window] = state.events[0].training_window.mds_windows
    rows = window_rows(paths.mds_root / f"{MODEL}.tokens" / window)
    n = len(rows["lengths"])
    assert metrics["train_rows"] == n > 0 and metrics["train_tokens"] > 0
    assert metrics["stale_rows"] == 0 and metrics["dead_letter_rows"] == 0
    by_tokens = {tuple(p + c): (rid, p, m) for rid, _, _, m, c, p in episodes}
    trained = []
    for i in range(n):
        length = int(rows["lengths"][i])
        rid, prompt, mask = by_tokens[tuple(rows["input_ids"][i, :length].tolist())]
        assert rows["target"][i, :length].tolist() == [0] * len(prompt) + mask
        assert not rows["target"][i, length:].any()
        trained.append((rid, mask))
    assert {rid for rid, _ in trained} & first_ids.keys()  # the worker's episodes too
    assert any(0 in mask for _, mask in trained)  # tool observations were context, not targets
