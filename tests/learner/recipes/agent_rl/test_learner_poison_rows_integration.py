"""No input stops the agent learner, on the real stack: a served completion as long as the
serving context allows (with a reaction) and a rollout trial of a 4,096-token budget go through
the reward joiner into the lake beside ordinary trials and a multi-turn episode (its tool
observation masked out); the learner cuts what fits once its
prompt is shortened, leaves out what cannot fit, trains the next version and reports both in
the version's record."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import torch

from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from learner.continuous import ContinuousLearner, LearnerPaths
from learner.eval_suite import EvalConfig
from learner.recipes.agent_rl.recipe import AgentLoopConfig, AgentRLConfig, AgentRLRecipe
from model_registry.artifacts import publish_artifact
from model_registry.registry import ModelRegistry, ModelTopics
from policies.agent_lm import AgentModelConfig, build_model, save_checkpoint
from schemas.enums import AgentReaction, ModelEventType
from schemas.events import AgentCompletion, AgentFeedback, Reward, RolloutResult
from streams.admin import TopicAdmin
from streams.client import TelemetryClient
from streams.privacy import Pseudonymizer
from streams.topic_io import EventProducer
from streams.topics import COMPLETIONS_TOPIC, REWARDS_TOPIC, ROLLOUTS_TOPIC
from tests.fleet.agent_lm_fixture import tiny_lm
from tests.learner.recipes.agent_rl.agent_lake import write_lake_file
from tests.processors.joiner.test_joiner_worker import Topics, Worker, read_decoded

pytestmark = pytest.mark.integration

MODEL = "agent-poison-test"
CONTEXT = 256  # the serving replica's context: prompt + max_tokens never exceed it
ROLLOUT_BUDGET = 4096  # `flywheel rollouts --max-tokens`' largest value
GROUPS = 6  # of 3 trials (the test joiner's group size)


def _ids(n: int, salt: int) -> tuple[int, ...]:
    return tuple(3 + (i * 7 + salt) % 290 for i in range(n))


def _trial(group: int, index: int, prompt: int, completion: int, reward: float) -> RolloutResult:
    return RolloutResult(
        event_time=datetime.now(UTC), producer="test", rollout_id=f"r-{group}-{index}",
        task_id=f"t-{group}", group_id=f"g-{group}", model_name=MODEL, model_version=1,
        prompt_tokens=prompt, completion_tokens=completion, tool_calls=0,
        tests_passed=round(reward * 5), tests_total=5, reward_components={"tests": reward},
        behaviour_logprobs=(-1.0,) * completion, duration_ms=1,
        prompt_token_ids=_ids(prompt, group), completion_token_ids=_ids(completion, index),
        temperature=1.0, top_p=0.9 if group % 2 else 1.0, max_new_tokens=ROLLOUT_BUDGET,
    )  # fmt: skip


def _served(completion_id: str, prompt: int, completion: int) -> AgentCompletion:
    return AgentCompletion(
        event_time=datetime.now(UTC), producer="serve/test", completion_id=completion_id,
        request_id=completion_id, session_id="sess-1", user_id="alice", api_key="ide",
        model_name=MODEL, model_version=1, channel="production", endpoint="completions",
        choice_index=0, prompt_tokens=prompt, cached_prompt_tokens=0,
        completion_tokens=completion, prompt_token_ids=_ids(prompt, 1),
        completion_token_ids=_ids(completion, 2), behaviour_logprobs=(-1.0,) * completion,
        completion_text="x", temperature=1.0, top_p=1.0, max_tokens=completion,
        finish_reason="length", latency_ms=1, privacy_mode=False,
    )  # fmt: skip


def test_overlong_rows_are_cut_or_left_out_and_the_learner_trains_the_next_version(
    stack: Settings, unique: str, tmp_path: Path
) -> None:
    topics, model_topics = Topics(unique), ModelTopics.prefixed(unique)
    TopicAdmin(stack.kafka_client_config()).ensure([*topics.specs(), *model_topics.specs()])
    codec = make_codec(stack)
    registry = ModelRegistry(stack.kafka_client_config(), codec, topics=model_topics)
    _, tokenizer = tiny_lm()
    torch.manual_seed(1)
    config = AgentModelConfig(hidden_size=32, layers=1, heads=2, kv_heads=1,
                              intermediate_size=64, vocab_size=300, max_positions=1024)  # fmt: skip
    save_checkpoint(build_model(config, tokenizer), tokenizer, tmp_path / "v1")
    registry.register(MODEL, publish_artifact(tmp_path / "models", MODEL, 1, tmp_path / "v1"),
                      parent_version=None, reward_fn="sft@1")  # fmt: skip
    registry.promote(MODEL, 1)

    # Rollout groups: the first holds a trial of the whole 4,096-token budget (left out) and one
    # whose prompt must be cut (100 + 60 > 128); the rest are ordinary.
    trials = [_trial(0, 0, 20, ROLLOUT_BUDGET, 1.0), _trial(0, 1, 100, 60, 0.0),
              _trial(0, 2, 20, 10, 0.6)]  # fmt: skip
    trials += [_trial(g, i, 20, 8 + i, (0.0, 1.0, 0.4)[i]) for g in range(1, GROUPS)
               for i in range(3)]  # fmt: skip
    # One multi-turn episode: turn (3 tokens), a tool observation (3, masked out, log-prob 0.0),
    # turn (3); the windows train its 6 generated tokens only.
    mask = (1, 1, 1, 0, 0, 0, 1, 1, 1)
    trials[4] = dataclasses.replace(
        trials[4], turns=2, tool_calls=1, completion_mask=mask, completion_tokens=6,
        behaviour_logprobs=tuple(-1.0 if m else 0.0 for m in mask),
    )  # fmt: skip
    assert len(trials[4].completion_token_ids) == len(mask)
    producer = EventProducer(stack.kafka_client_config())
    for trial in trials:
        producer.send(topics.rollouts, trial.group_id, codec.encode_event(ROLLOUTS_TOPIC, trial))
    producer.flush()
    # Served completions of the whole context, each with a reaction: one whose completion alone
    # is over the window (left out), one whose prompt is (cut); and an ordinary one reacted to
    # otherwise, so the served rows' advantages are not flat (flat rows train nothing).
    served = [_served("c-long:0", CONTEXT - 200, 200), _served("c-cut:0", CONTEXT - 56, 56),
              _served("c-ok:0", 20, 10)]  # fmt: skip
    reactions = [AgentReaction.ACCEPTED, AgentReaction.ACCEPTED, AgentReaction.REVERTED]
    client = TelemetryClient(stack.kafka_client_config(), codec, tmp_path / "spool",
                             Pseudonymizer(b"k" * 32), topics=topics.by_platform)  # fmt: skip
    now = datetime.now(UTC)
    for event, reaction in zip(served, reactions, strict=True):
        client.agent_completion(event)
        client.agent_feedback(AgentFeedback(
            producer="ide/test", completion_id=event.completion_id, session_id="sess-1",
            user_id="alice", reaction=reaction, event_time=now,
        ))  # fmt: skip
    client.agent_feedback(AgentFeedback(  # moves the feedback watermark past the deadline
        producer="ide/test", completion_id="tick:0", session_id="sess-1",
        reaction=AgentReaction.REVERTED, event_time=now + timedelta(seconds=10),
    ))  # fmt: skip
    client.flush()
    client.close()

    joiner = Worker(stack, topics, f"{unique}.joiner", tmp_path / "joiner.log")
    joiner.start()
    try:
        rewards = read_decoded(stack, codec, topics.rewards, REWARDS_TOPIC, Reward,
                               len(trials) + len(served), 120)  # fmt: skip
    finally:
        joiner.stop()
    assert len(rewards) == len(trials) + len(served), joiner.log.read_text()[-3000:]
    completions = read_decoded(stack, codec, topics.by_platform[COMPLETIONS_TOPIC],
                               COMPLETIONS_TOPIC, AgentCompletion, 3, 30)  # fmt: skip

    # The sink's files, as the sink writes them.
    lake = tmp_path / "lake"
    write_lake_file(lake, ROLLOUTS_TOPIC, trials, now)
    write_lake_file(lake, COMPLETIONS_TOPIC, completions, now)
    write_lake_file(lake, REWARDS_TOPIC, rewards, now)
    rl = AgentRLConfig(
        model_name=MODEL,
        train=dataclasses.replace(AgentRLConfig().train, batch_size=1, duration="2ba",
                                  checkpoint_interval="1ba"),
        eval=EvalConfig(tasks=8, max_new_tokens=8),
        loop=AgentLoopConfig(min_new_rows=4, poll_s=0.5),
    )  # fmt: skip
    paths = LearnerPaths(lake, tmp_path / "mds", tmp_path / "models", tmp_path / "runs")
    learner = ContinuousLearner(AgentRLRecipe(rl, paths), paths, stack.kafka_client_config(),
                                codec, registry=registry, rewards_topic=topics.rewards)  # fmt: skip
    results = learner.run(threading.Event(), max_versions=2)

    assert [r.version for r in results] == [2]  # trained and decided: nothing stopped it
    history = registry.versions(MODEL)[2].events
    assert history[0].event_type == ModelEventType.REGISTERED
    metrics = history[-1].metrics
    assert metrics["overlong_rows"] == 2  # the 4,096-token trial and the 200-token completion
    assert metrics["cut_rows"] == 2  # the 100-token prompt's trial and the 200-token prompt's
    assert metrics["dead_letter_rows"] == 0
    assert metrics["train_rows"] > 0 and metrics["train_tokens"] > 0
