"""Rollout workers: the agent's inference fleet (``flywheel rollouts``, DESIGN §12).

A worker follows the agent model's channels with the fleet's :class:`ModelSubscriber` (hash
check, atomic hot swap, canary routing, acks), takes tasks (from ``agent.tasks`` or from its
environment's training pool), and for each runs a *group* of parallel trials: every prompt of a
batch repeated ``group_size`` times in one ``generate`` call (sampling, KV cache), then every
completion scored in the sandbox in parallel. Each trial becomes one ``RolloutResult`` on
``rollouts.results`` keyed by its group: prompt and completion token ids, the behaviour
log-probability of every generated token, the version that produced it, the sampling parameters,
the sandbox's status and the reward components.

A task of a multi-turn environment (``environments.episodes.MultiTurnEnvironment``: a repository
fixed with tools) is a group of *episodes* instead: ``environments.episode_runner.run_episodes``
steps them all in lock-step (one ``generate`` per turn over every running episode, then their
tool calls in parallel) within the worker's ``EpisodeLimits``. Each episode is one
``RolloutResult`` (its turns and tool observations as one completion with a loss mask) and one
``ToolCallObserved`` per turn on ``agent.tool_calls`` (``fleet.episode_events``).

Ids are deterministic for tasks from Kafka: the group id derives from the task event's id and a
trial's rollout id from its group and index, so a task redelivered after a crash (results
produced, offsets not yet committed) produces the same ids, which the joiner counts once.
Canary routing is by task id: a stable share of task traffic goes to the canary version.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message

from contracts.dead_letters import Origin, dead_letter
from contracts.errors import RecordRejected
from environments.base import (
    Environment,
    EnvironmentRegistry,
    Score,
    Task,
    family,
    score_all,
    training_tasks,
)
from environments.curriculum import Curriculum
from environments.episode_runner import run_episodes
from environments.episodes import EpisodeLimits, MultiTurnEnvironment
from environments.errors import TaskEnvironmentError
from fleet.episode_events import episode_result, tool_call_events
from fleet.subscriber import ModelSubscriber
from policies.agent_lm import load_checkpoint
from policies.agent_sampling import Completion, SamplingParams, sample
from schemas.events import AgentTask, RolloutResult, ToolCallObserved
from streams.errors import DecodeError
from streams.serde import AvroCodec
from streams.topic_io import EventProducer
from streams.topics import AGENT_TASKS_TOPIC, ROLLOUTS_TOPIC, TOOL_CALLS_TOPIC, dlq_topic

log = logging.getLogger(__name__)
_IDS = uuid.UUID("6d1f6a52-4c6e-4d0b-9a51-2f0c1c7e1b10")  # namespace of derived group ids


@dataclass(frozen=True)
class AgentPolicy:
    """One loaded version of the agent LM."""

    model: Any
    tokenizer: Any


def load_agent_policy(artifact_dir: Path, _version: int) -> AgentPolicy:
    """The subscriber's loader: a verified HF checkpoint directory → a policy on the CPU."""
    model, tokenizer = load_checkpoint(artifact_dir)
    return AgentPolicy(model, tokenizer)


@dataclass(frozen=True)
class TaskRequest:
    """A task to run: ``group_id`` set when it must be deterministic (tasks from Kafka)."""

    task: Task
    group_size: int
    group_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def rollout_id(group_id: str, index: int) -> str:
    """The id of trial ``index`` of a group: derived, so a redelivered task repeats it."""
    return str(uuid.uuid5(_IDS, f"{group_id}/{index}"))


@dataclass(frozen=True)
class RolloutBatch:
    """What a batch of tasks produced: one result per trial, and the tool calls of episodes."""

    results: list[RolloutResult] = field(default_factory=list)
    tool_calls: list[ToolCallObserved] = field(default_factory=list)


@dataclass
class RolloutStats:
    """Counters for status lines and metrics (episodes: ``generate_s`` is their whole run,
    turns and tool calls interleaved)."""

    tasks: int = 0
    trials: int = 0
    passed: int = 0
    tool_calls: int = 0
    generated_tokens: int = 0
    generate_s: float = 0.0
    score_s: float = 0.0
    dead_letters: int = 0
    by_version: dict[int, int] = field(default_factory=dict)

    def line(self) -> str:
        rate = self.generated_tokens / self.generate_s if self.generate_s else 0.0
        share = self.passed / self.trials if self.trials else 0.0
        versions = ", ".join(f"v{v}: {n}" for v, n in sorted(self.by_version.items()))
        calls = f", {self.tool_calls:,} tool calls" if self.tool_calls else ""
        return (
            f"rollouts: {self.tasks:,} tasks, {self.trials:,} trials, {share:.1%} passed{calls}, "
            f"{rate:,.0f} generated tok/s, {self.dead_letters} dead letters ({versions or '-'})"
        )


class RolloutWorker:
    """Runs groups of trials with the version each task routes to, and emits their results.

    The caller produces what :meth:`run_batch` returns; the worker never raises for anything a
    completion or an episode's action does. ``limits`` bound each episode of a multi-turn
    environment (None: ``EpisodeLimits()``).
    """

    def __init__(
        self,
        subscriber: ModelSubscriber[AgentPolicy | None],
        environments: EnvironmentRegistry,
        *,
        sampling: SamplingParams,
        producer: str,
        seed: int | None = None,
        limits: EpisodeLimits | None = None,
    ) -> None:
        self.subscriber = subscriber
        self.environments = environments
        self.sampling = sampling
        self.producer = producer
        self.limits = limits or EpisodeLimits()
        self.stats = RolloutStats()
        self._rng = random.Random(seed)

    def run(self, requests: Sequence[TaskRequest]) -> list[RolloutResult]:
        """The results of every trial of ``requests`` (none while no version is served)."""
        return self.run_batch(requests).results

    def run_batch(self, requests: Sequence[TaskRequest]) -> RolloutBatch:
        """Every trial of ``requests`` (nothing while no version is served): single-shot tasks
        sampled and scored, multi-turn tasks run as episodes."""
        by_route: dict[tuple[int, int], list[TaskRequest]] = {}
        policies: dict[int, AgentPolicy] = {}
        for request in requests:
            routed = self.subscriber.route(request.task.task_id)
            if routed.model is None:
                continue  # nothing in production yet: the caller retries later
            policies[routed.version] = routed.model
            by_route.setdefault((routed.version, request.group_size), []).append(request)
        out = RolloutBatch()
        for (version, group_size), batch in by_route.items():
            single: list[TaskRequest] = []
            episodic: dict[str, tuple[MultiTurnEnvironment, list[TaskRequest]]] = {}
            for request in batch:
                environment = self.environments.get_any(request.task.environment)
                if isinstance(environment, MultiTurnEnvironment):
                    episodic.setdefault(environment.name, (environment, []))[1].append(request)
                else:
                    single.append(request)
            if single:
                out.results.extend(self._run_group(policies[version], version, group_size, single))
            for multi_turn, of_env in episodic.values():
                done = self._run_episodes(
                    policies[version], version, group_size, multi_turn, of_env
                )
                out.results.extend(done.results)
                out.tool_calls.extend(done.tool_calls)
        return out

    def _run_episodes(
        self,
        policy: AgentPolicy,
        version: int,
        group_size: int,
        environment: MultiTurnEnvironment,
        batch: list[TaskRequest],
    ) -> RolloutBatch:
        """``group_size`` episodes of each task of ``batch``, all stepped together."""
        started = time.monotonic()
        traces = run_episodes(
            policy.model, policy.tokenizer, environment,
            [r.task for r in batch for _ in range(group_size)], self.sampling,
            limits=self.limits, seed=self._rng.randrange(1 << 31),
        )  # fmt: skip
        out = RolloutBatch()
        for index, trace in enumerate(traces):
            request = batch[index // group_size]
            result = episode_result(
                trace, producer=self.producer,
                rollout_id=rollout_id(request.group_id, index % group_size),
                group_id=request.group_id, model_name=self.subscriber.model_name,
                model_version=version, sampling=self.sampling,
            )  # fmt: skip
            out.results.append(result)
            out.tool_calls.extend(tool_call_events(trace, result))
        self.stats.tasks += len(batch)
        self.stats.trials += len(traces)
        self.stats.passed += sum(1 for t in traces if t.score.passed)
        self.stats.tool_calls += sum(r.tool_calls for r in out.results)
        self.stats.generated_tokens += sum(r.completion_tokens for r in out.results)
        self.stats.generate_s += time.monotonic() - started
        self.stats.by_version[version] = self.stats.by_version.get(version, 0) + len(traces)
        return out

    def _run_group(
        self, policy: AgentPolicy, version: int, group_size: int, batch: list[TaskRequest]
    ) -> list[RolloutResult]:
        environments = [self.environments.get(r.task.environment) for r in batch]
        prompts = [env.reset(r.task) for env, r in zip(environments, batch, strict=True)]
        started = time.monotonic()
        groups = sample(
            policy.model, policy.tokenizer, prompts, group_size, self.sampling,
            seed=self._rng.randrange(1 << 31),
        )  # fmt: skip
        generate_s = time.monotonic() - started
        trials = [(r, env, c) for r, env, group in zip(batch, environments, groups, strict=True)
                  for c in group]  # fmt: skip
        started = time.monotonic()
        scores = score_all([(env, r.task, c.text) for r, env, c in trials])
        self.stats.score_s += time.monotonic() - started
        per_trial_ms = round(generate_s * 1000 / max(len(trials), 1))
        results = [
            self._result(request, version, index % group_size, completion, score, per_trial_ms)
            for index, ((request, _, completion), score) in enumerate(
                zip(trials, scores, strict=True)
            )
        ]
        self.stats.tasks += len(batch)
        self.stats.trials += len(trials)
        self.stats.passed += sum(1 for r in results if r.tests_passed == r.tests_total)
        self.stats.generated_tokens += sum(len(c.token_ids) for _, _, c in trials)
        self.stats.generate_s += generate_s
        self.stats.by_version[version] = self.stats.by_version.get(version, 0) + len(trials)
        return results

    def _result(
        self,
        request: TaskRequest,
        version: int,
        index: int,
        completion: Completion,
        score: Score,
        generate_ms: int,
    ) -> RolloutResult:
        task = request.task
        return RolloutResult(
            producer=self.producer,
            rollout_id=rollout_id(request.group_id, index),
            task_id=task.task_id,
            group_id=request.group_id,
            model_name=self.subscriber.model_name,
            model_version=version,
            prompt_tokens=len(completion.prompt_ids),
            completion_tokens=len(completion.token_ids),
            tool_calls=0,
            tests_passed=score.tests_passed,
            tests_total=score.tests_total,
            reward_components=dict(score.components),
            behaviour_logprobs=completion.logprobs,
            duration_ms=generate_ms + score.duration_ms,
            environment=task.environment,
            difficulty=task.difficulty,
            prompt_token_ids=completion.prompt_ids,
            completion_token_ids=completion.token_ids,
            completion_text=completion.text,
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            max_new_tokens=self.sampling.max_new_tokens,
            sandbox_status=score.status,
            sandbox_reason=score.reason or None,
        )


def pool_tasks(
    environments: EnvironmentRegistry,
    environment: str,
    group_size: int,
    seed: int,
    difficulties: Sequence[int] = (1, 2, 3),
    curriculum: Curriculum | None = None,
) -> Iterator[TaskRequest]:
    """Endless training tasks from ``environment``'s pool (never a held-out task:
    ``environments.base.training_tasks`` skips them), each to run as a group of ``group_size``
    trials; with a ``curriculum`` (:func:`record_levels` feeds it the trials' outcomes) each at the
    level it picks, else at a level drawn from ``difficulties``."""
    level = curriculum.draw if curriculum is not None else None
    for task in training_tasks(environments, environment, seed, difficulties, level):
        yield TaskRequest(task, group_size)


def record_levels(curriculum: Curriculum, results: Sequence[RolloutResult]) -> None:
    """Each trial's level and whether it passed every hidden test, into ``curriculum``."""
    for result in results:
        passed = result.tests_total > 0 and result.tests_passed == result.tests_total
        curriculum.record(result.difficulty, passed)


def task_refusal(environments: EnvironmentRegistry, task: Task) -> RecordRejected | None:
    """Why the feed must not run ``task``, or None to run it: ``invalid_task`` when no registered
    environment can read it, ``held_out_task`` when its environment holds it out (an eval task:
    trials of it would train the next version on the release check's own questions)."""
    try:
        environment = family(environments.get_any(task.environment))
        if isinstance(environment, Environment):
            environment.reset(task)  # the spec must be readable before trials are spent on it
        if environment.held_out(task):
            return RecordRejected(
                "held_out_task",
                f"task {task.task_id} is held out by {task.environment} (its eval sets); "
                "held-out tasks are never run for training",
            )
    except TaskEnvironmentError as exc:
        return RecordRejected("invalid_task", str(exc))
    return None


class KafkaTaskFeed:
    """Tasks from ``agent.tasks`` in a consumer group: a batch is committed only after its
    results were produced (:meth:`commit`). An undecodable task, one no environment can read or
    one its environment holds out (:func:`task_refusal`) goes to ``dlq.rollouts`` with the
    cause, and the feed goes on."""

    def __init__(
        self,
        kafka_config: dict[str, str],
        codec: AvroCodec,
        environments: EnvironmentRegistry,
        *,
        group: str,
        default_group_size: int,
        topic: str = AGENT_TASKS_TOPIC,
        dlq: str = dlq_topic("rollouts"),
        dead_letters: EventProducer | None = None,
    ) -> None:
        self._codec = codec
        self._environments = environments
        self._default_group_size = default_group_size
        self._topic, self._dlq = topic, dlq
        self._dead_letters = dead_letters or EventProducer(kafka_config)
        self.dead_lettered = 0
        self._consumer = Consumer(
            {
                **kafka_config,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "log_level": 4,
            }
        )
        self._consumer.subscribe([topic])

    def poll(self, max_tasks: int, timeout_s: float = 1.0) -> list[TaskRequest]:
        """Up to ``max_tasks`` tasks (fewer when the topic has fewer)."""
        messages = self._consumer.consume(max_tasks, timeout=timeout_s)
        requests = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", self._topic, error)
                continue
            request = self._request(message)
            if request is not None:
                requests.append(request)
        return requests

    def commit(self) -> None:
        """Commit the offsets of everything polled so far (call after the results are out)."""
        try:
            self._consumer.commit(asynchronous=False)
        except Exception as exc:  # nothing to commit, or a rebalance: re-run
            log.info("commit skipped: %s", exc)

    def close(self) -> None:
        self._dead_letters.flush()
        self._consumer.close()

    def _request(self, message: Message) -> TaskRequest | None:
        value = message.value() or b""
        try:
            event = AgentTask.from_record(self._codec.decode(AGENT_TASKS_TOPIC, value))
        except DecodeError as exc:
            self._dead_letter(message, RecordRejected(exc.cause, str(exc)))
            return None
        task = Task(event.task_id, event.environment, event.difficulty, event.spec)
        refusal = task_refusal(self._environments, task)
        if refusal is not None:
            self._dead_letter(message, refusal)
            return None
        size = event.group_size or self._default_group_size
        return TaskRequest(task, size, str(uuid.uuid5(_IDS, event.event_id)))

    def _dead_letter(self, message: Message, rejected: RecordRejected) -> None:
        origin = Origin(message.topic() or "", message.partition() or 0,
                        message.offset() or 0, message.key(), message.value() or b"")  # fmt: skip
        letter = dead_letter(rejected, origin, stage="rollouts", carries_code_text=False)
        self._dead_letters.send(self._dlq, letter.key, letter.value, letter.headers)
        self._dead_letters.flush()
        self.dead_lettered += 1


def produce_results(
    producer: EventProducer, codec: AvroCodec, results: Sequence[RolloutResult],
    topic: str = ROLLOUTS_TOPIC, *, tool_calls: Sequence[ToolCallObserved] = (),
    tool_calls_topic: str = TOOL_CALLS_TOPIC,
) -> None:  # fmt: skip
    """Write ``results`` and the episodes' ``tool_calls``, keyed by group id, and wait for
    every acknowledgement (the caller commits its tasks after)."""
    for result in results:
        producer.send(topic, result.group_id, codec.encode_event(ROLLOUTS_TOPIC, result))
    for call in tool_calls:
        value = codec.encode_event(TOOL_CALLS_TOPIC, call)
        producer.send(tool_calls_topic, call.group_id, value)
    producer.flush()
