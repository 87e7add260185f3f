"""The agent learner on the real stack: a cycle on rewarded trials in the lake publishes a
version whose eval-suite pass@1 beats production's and canaries it on a rollout worker's tasks;
a candidate trained on the same trials with the advantages' sign flipped (a planted bad
candidate) is refused and never reaches production.

Each task's group holds trials the production model sampled plus one "expert" trial, the
environment's reference solution with its log-probability under production as the behaviour
log-probs: a strong, deterministic signal, so a short cycle on a tiny model moves pass@1."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from fleet.rollout_worker import AgentPolicy, RolloutWorker, load_agent_policy, pool_tasks
from fleet.subscriber import ModelSubscriber
from flywheel.clients import codec as make_codec
from flywheel.settings import Settings
from learner.continuous import ContinuousLearner, LearnerPaths
from learner.engine.causal_lm import next_token_logprobs
from learner.engine.trainer import TrainerConfig
from learner.eval_suite import EvalConfig
from learner.recipes.agent_rl.recipe import AgentLoopConfig, AgentRLConfig, AgentRLRecipe
from learner.recipes.agent_sft.recipe import AgentSFTConfig, CorpusConfig, run_sft
from model_registry.artifacts import publish_artifact
from model_registry.canary import CanaryConfig
from model_registry.registry import ModelRegistry, ModelTopics
from policies.agent_lm import AgentModelConfig, load_checkpoint
from policies.agent_sampling import SamplingParams, sample
from processors.rewards.groups import group_advantages
from schemas.enums import Channel, ModelEventType
from schemas.events import RolloutResult
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topic_io import EventProducer
from streams.topics import REWARDS_TOPIC, ROLLOUTS_TOPIC, TopicSpec
from tests.learner.recipes.agent_rl.agent_lake import write_lake_file

pytestmark = pytest.mark.integration

MODEL = "agent-rl-test"
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=24)
TASKS, SAMPLED = 160, 3  # training tasks; sampled trials per group (+1 expert trial)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny supervised warm-up: production's v1."""
    config = AgentSFTConfig(
        model=AgentModelConfig(vocab_size=300, hidden_size=64, layers=2, heads=4, kv_heads=2,
                               intermediate_size=128),
        corpus=CorpusConfig(tasks=1000),
        train=TrainerConfig(batch_size=4, duration="120ba", checkpoint_interval="60ba", lr=3e-3,
                            grad_clip_norm=1.0, loader="streaming"),
        eval=EvalConfig(tasks=20),
    )  # fmt: skip
    return run_sft(config, tmp_path_factory.mktemp("sft"), log=lambda _: None).checkpoint


@dataclasses.dataclass
class Harness:
    stack: Settings
    codec: AvroCodec
    registry: ModelRegistry
    model_topics: ModelTopics
    rewards_topic: str
    paths: LearnerPaths
    warm_start: Path
    prefix: str

    def learner(self, **train: object) -> ContinuousLearner[Any, Any]:
        config = AgentRLConfig(
            model_name=MODEL,
            # batches of 4 samples (64 trials), as this small window was measured with
            train=dataclasses.replace(AgentRLConfig().train, batch_size=4, duration="3ep",
                                      lr=5e-4, **train),
            canary=CanaryConfig(traffic_fraction=0.5, min_requests=24, max_requests=48,
                                tolerance=1.0, timeout_s=120.0),
            loop=AgentLoopConfig(min_new_rows=64, poll_s=0.5),
        )  # fmt: skip
        return ContinuousLearner(
            AgentRLRecipe(config, self.paths), self.paths, self.stack.kafka_client_config(),
            self.codec, registry=self.registry, rewards_topic=self.rewards_topic,
        )  # fmt: skip


@pytest.fixture
def harness(stack: Settings, unique: str, tmp_path: Path, warm_start: Path) -> Harness:
    model_topics = ModelTopics.prefixed(unique)
    rewards_topic = f"{unique}.rewards"
    TopicAdmin(stack.kafka_client_config()).ensure(
        [*model_topics.specs(), TopicSpec(rewards_topic, "group_id", "Reward", 2)]
    )
    codec = make_codec(stack)
    registry = ModelRegistry(stack.kafka_client_config(), codec, topics=model_topics)
    ref = publish_artifact(tmp_path / "models", MODEL, 1, warm_start)
    registry.register(MODEL, ref, parent_version=None, reward_fn="sft@1")
    registry.promote(MODEL, 1)
    paths = LearnerPaths(tmp_path / "lake", tmp_path / "mds", tmp_path / "models",
                         tmp_path / "runs")  # fmt: skip
    return Harness(stack, codec, registry, model_topics, rewards_topic, paths, warm_start, unique)


def _write_trials(h: Harness, *, flip: bool) -> None:
    """Groups of production's sampled trials plus an expert trial, scored, with their grpo@1
    Rewards (advantages negated with ``flip``), as lake files."""
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    model, tokenizer = load_checkpoint(h.warm_start)
    tasks = env.tasks("train", TASKS, seed=5)
    prompts = [env.reset(t) for t in tasks]
    groups = sample(model, tokenizer, prompts, SAMPLED, SAMPLING, seed=3)
    now = datetime.now(UTC)
    results: list[RolloutResult] = []
    for task, prompt, group in zip(tasks, prompts, groups, strict=True):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        solution = env.solution(task)  # type: ignore[attr-defined]
        expert = [*tokenizer(solution, add_special_tokens=False)["input_ids"],
                  tokenizer.eos_token_id]  # fmt: skip
        ids = torch.tensor([[*prompt_ids, *expert]])
        with torch.no_grad():
            mu = next_token_logprobs(model, ids, torch.tensor([ids.shape[1]]))[0]
        trials = [(c.prompt_ids, c.token_ids, c.logprobs, c.text) for c in group]
        trials.append((tuple(prompt_ids), tuple(expert),
                       tuple(mu[len(prompt_ids) - 1 :].tolist()), solution))  # fmt: skip
        group_id = f"g-{task.task_id}"
        for i, (p_ids, c_ids, logprobs, text) in enumerate(trials):
            score = env.score(task, text)
            results.append(RolloutResult(
                event_time=now, producer="test", rollout_id=f"{group_id}-{i}",
                task_id=task.task_id, group_id=group_id, model_name=MODEL, model_version=1,
                prompt_tokens=len(p_ids), completion_tokens=len(c_ids), tool_calls=0,
                tests_passed=score.tests_passed, tests_total=score.tests_total,
                reward_components=dict(score.components), behaviour_logprobs=logprobs,
                duration_ms=1, prompt_token_ids=p_ids, completion_token_ids=c_ids,
                temperature=SAMPLING.temperature, top_p=SAMPLING.top_p,
            ))  # fmt: skip
    rewards = []
    for start in range(0, len(results), SAMPLED + 1):
        for r in group_advantages(results[start : start + SAMPLED + 1], now, "test"):
            rewards.append(dataclasses.replace(r, advantage=-r.advantage) if flip else r)
    write_lake_file(h.paths.lake, ROLLOUTS_TOPIC, results, now)
    write_lake_file(h.paths.lake, REWARDS_TOPIC, rewards, now)


def _rollout_fleet(h: Harness, stop: threading.Event) -> None:
    """A rollout worker following the model's channels (canary by task), with the joiner's
    group advantages produced as Rewards: the canary's online evidence."""
    subscriber: ModelSubscriber[AgentPolicy | None] = ModelSubscriber(
        h.stack.kafka_client_config(), h.codec, MODEL, "rollout-1", load_agent_policy, None,
        topics=h.model_topics, poll_interval_s=0.1,
    )  # fmt: skip
    worker = RolloutWorker(subscriber, ENVIRONMENTS, sampling=SAMPLING, producer="test", seed=1)
    producer = EventProducer(h.stack.kafka_client_config())
    tasks: Iterator = pool_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, 4, seed=11)
    try:
        while not stop.is_set():
            subscriber.poll_once()
            results = worker.run([next(tasks) for _ in range(8)])
            by_group: dict[str, list[RolloutResult]] = {}
            for r in results:
                by_group.setdefault(r.group_id, []).append(r)
            for group in by_group.values():
                for reward in group_advantages(group, datetime.now(UTC), "test"):
                    producer.send(h.rewards_topic, reward.group_id,
                                  h.codec.encode_event(REWARDS_TOPIC, reward))  # fmt: skip
            producer.flush()
    finally:
        subscriber.close()


def test_a_cycle_publishes_a_better_version_and_canaries_it(harness: Harness) -> None:
    _write_trials(harness, flip=False)
    stop = threading.Event()
    fleet = threading.Thread(target=_rollout_fleet, args=(harness, stop), daemon=True)
    fleet.start()
    try:
        results = harness.learner().run(threading.Event(), max_versions=2)
    finally:
        stop.set()
        fleet.join(60)
    assert [r.version for r in results] == [2]
    history = harness.registry.versions(MODEL)[2].events
    kinds = [e.event_type for e in history]
    assert kinds[:3] == [ModelEventType.REGISTERED, ModelEventType.GATE_PASSED,
                         ModelEventType.CANARY_STARTED]  # fmt: skip
    assert kinds[-1] in (ModelEventType.PROMOTED, ModelEventType.ROLLED_BACK)
    metrics = history[-1].metrics
    assert metrics["eval_pass_at_1"] > metrics["eval_production_pass_at_1"]
    assert metrics["eval_pass_lift_lower"] > 0 and metrics["train_tokens"] > 0
    assert metrics["train_rows"] > 0 and metrics["stale_rows"] == 0
    assert metrics["dead_letter_rows"] == 0 and metrics["greedy_rows"] == 0
    assert history[1].reason and "pass@1" in history[1].reason
    assert history[-1].reason  # the canary's verdict, with its numbers


def test_a_planted_bad_candidate_never_reaches_production(harness: Harness) -> None:
    _write_trials(harness, flip=True)  # trained to prefer what failed
    results = harness.learner().run(threading.Event(), max_versions=2)
    assert [(r.version, r.decision) for r in results] == [(2, ModelEventType.GATE_FAILED)]
    state = harness.registry.versions(MODEL)[2]
    metrics = state.events[-1].metrics
    # Worse on the held-out tasks: by mean reward (pass@1 of a model this small on unseen
    # programs is near 0 before and after, so it cannot show the harm)
    assert metrics["eval_mean_reward"] < metrics["eval_production_mean_reward"]
    assert metrics["eval_reward_lift_lower"] < 0
    production = harness.registry.channels(MODEL)[Channel.PRODUCTION]
    assert production.version == 1 and Channel.CANARY not in harness.registry.channels(MODEL)
    # nothing was trained twice: the window is recorded once, by the refused version
    assert len(state.events[0].training_window.mds_windows) == 1


CHILD = Path(__file__).parent / "scripts" / "agent_learner_child.py"


def _wait(found: Callable[[], bool], child: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.poll() is None:
        if found():
            return True
        time.sleep(0.01)
    return False


def test_a_learner_killed_mid_step_and_mid_checkpoint_resumes_and_trains_each_window_once(
    harness: Harness, tmp_path: Path
) -> None:
    _write_trials(harness, flip=False)
    spec = {"prefix": harness.prefix, "model": MODEL, "root": str(tmp_path), "duration": "6ep",
            "rewards_topic": harness.rewards_topic}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    runs = harness.paths.runs_root / MODEL

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(CHILD), str(tmp_path / "spec.json")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

    # 1. Killed mid-step: after its first complete checkpoint, before the next.
    child = start()
    assert _wait(lambda: any(runs.glob("*/ckpt-*[0-9]")), child, 240), child.stderr
    child.kill()
    child.wait()
    # 2. Killed mid-checkpoint: while a checkpoint is being written.
    child = start()
    killed_in_checkpoint = _wait(lambda: any(runs.glob("*/*.tmp-*")), child, 240)
    child.kill()
    child.wait()
    assert killed_in_checkpoint
    # 3. Run to the end.
    child = start()
    _, err = child.communicate(timeout=300)
    assert child.returncode == 0, err.decode()[-3000:]

    states = harness.registry.versions(MODEL)
    assert sorted(states) == [1, 2]  # one candidate, from one window
    window = states[2].events[0].training_window.mds_windows
    assert len(window) == 1 and [p.name for p in runs.iterdir() if p.is_dir()] == list(window)
    manifest = json.loads(
        (harness.paths.mds_root / f"{MODEL}.tokens" / "manifest.json").read_text()
    )
    [record] = manifest["windows"]
    # six epochs of the window's tokens in all (less the loader's dropped partial batches):
    # the resumed runs continued the killed one's progress in the same run directory
    tokens = states[2].latest.metrics["train_tokens"]
    assert 6 * 0.8 * record["trained_tokens"] <= tokens <= 6 * record["trained_tokens"]
