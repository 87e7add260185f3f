"""Episodes as events: a hand-built EpisodeTrace becomes one RolloutResult (tokens, mask, turns,
tool calls, score) and one ToolCallObserved per turn (deterministic ids, privacy mode); the
rollout worker runs a multi-turn environment's tasks as episodes."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, cast

import fastavro
import pytest

from environments.base import EnvironmentRegistry, Score, Task
from environments.episode_runner import EpisodeTrace
from environments.episodes import Episode, EpisodeLimits, ToolOutcome
from fleet import rollout_worker
from fleet.episode_events import episode_result, tool_call_events
from fleet.rollout_worker import AgentPolicy, RolloutWorker, TaskRequest
from fleet.subscriber import Routed
from policies.agent_chat import ToolCall
from policies.agent_sampling import SamplingParams
from schemas.catalog import parsed_schema
from schemas.enums import Channel
from schemas.events import RolloutResult, ToolCallObserved

TASK = Task("repo-1", "repository", 2, "{}")
SAMPLING = SamplingParams(0.7, 0.95, 32)


class _Trace(EpisodeTrace):
    """The runner renders the text; these tests need only that it is carried (or withheld)."""

    def completion_text(self) -> str:
        return "<turns and observations>"


def _assistant(call: ToolCall | None, text: str = "") -> dict[str, Any]:
    if call is None:  # an unreadable action stays plain text
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": "", "tool_calls": [call.openai()]}


def _trace(task: Task = TASK, passed: int = 1) -> EpisodeTrace:
    """run_tests, read_file (output truncated), an unreadable turn, submit."""
    messages = (
        {"role": "system", "content": "fix it"}, {"role": "user", "content": "tests fail"},
        _assistant(ToolCall("run_tests", {}, "call_0")), {"role": "tool", "content": "1 failed"},
        _assistant(ToolCall("read_file", {"path": "text.py"}, "call_1")),
        {"role": "tool", "content": "def shout(s): ..."},
        _assistant(None, "I think"), {"role": "tool", "content": "error: no tool call"},
        _assistant(ToolCall("submit", {}, "call_3")),
    )  # fmt: skip
    # turn 1 (3 tokens) | obs (2) | turn 2 (4) | obs (3) | turn 3 (2) | obs (2) | turn 4 (2)
    mask = (1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1)
    outcomes = (
        ToolOutcome(1, "run_tests", "ok", 40, 2, 30, False),
        ToolOutcome(2, "read_file", "ok", 3, 17, 900, True),
        ToolOutcome(3, "", "malformed", 0, 0, 19, False),
        ToolOutcome(4, "submit", "ok", 250, 2, 0, False),
    )
    return _Trace(
        task=task, messages=messages, prompt_ids=(1, 2, 3),
        completion_ids=tuple(range(10, 10 + len(mask))),
        logprobs=tuple(-0.5 if m else 0.0 for m in mask), mask=mask, outcomes=outcomes,
        score=Score({"tests": passed / 2, "full_pass": 0.0}, passed, 2, "ok"),
        ended="submitted", duration_ms=1234,
    )  # fmt: skip


def _result(trace: EpisodeTrace, privacy_mode: bool = False) -> RolloutResult:
    return episode_result(
        trace, producer="rollouts/test", rollout_id="ro-1", group_id="g-1",
        model_name="agent-lm", model_version=4, sampling=SAMPLING, privacy_mode=privacy_mode,
    )  # fmt: skip


def _round_trip(event: RolloutResult | ToolCallObserved) -> dict[str, Any]:
    schema = parsed_schema(event.SCHEMA_NAME)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, event.to_record())
    buffer.seek(0)
    return cast(dict[str, Any], fastavro.schemaless_reader(buffer, schema, schema))


def test_an_episode_is_one_rollout_result_with_its_mask() -> None:
    trace = _trace()
    result = _result(trace)
    assert (result.turns, result.tool_calls) == (4, 3)  # the unreadable turn is no call
    assert result.completion_mask == trace.mask
    assert result.completion_token_ids == trace.completion_ids
    assert result.behaviour_logprobs == trace.logprobs
    assert result.prompt_token_ids == (1, 2, 3)
    assert result.completion_tokens == 11  # generated: the four turns' tokens
    assert result.prompt_tokens == 3 + 7  # read: the prompt and the three observations
    assert (result.tests_passed, result.tests_total) == (1, 2)
    assert result.reward_components == {"tests": 0.5, "full_pass": 0.0}
    assert (result.sandbox_status, result.sandbox_reason) == ("ok", None)
    assert (result.temperature, result.top_p, result.max_new_tokens) == (0.7, 0.95, 32)
    assert (result.environment, result.difficulty, result.duration_ms) == ("repository", 2, 1234)
    assert result.completion_text == "<turns and observations>"
    decoded = _round_trip(result)
    assert decoded["completion_mask"] == list(trace.mask) and decoded["turns"] == 4


def test_every_turn_is_a_tool_call_event_with_a_derived_id() -> None:
    trace = _trace()
    result = _result(trace)
    calls = tool_call_events(trace, result)
    assert [c.turn for c in calls] == [1, 2, 3, 4]
    assert [c.tool for c in calls] == ["run_tests", "read_file", "", "submit"]
    assert [c.status for c in calls] == ["ok", "ok", "malformed", "ok"]
    assert [c.arguments for c in calls] == ["{}", '{"path":"text.py"}', None, "{}"]
    read = calls[1]
    assert (read.duration_ms, read.arguments_bytes, read.observation_bytes) == (3, 17, 900)
    assert read.truncated and not calls[0].truncated
    assert {(c.rollout_id, c.group_id, c.task_id) for c in calls} == {("ro-1", "g-1", "repo-1")}
    assert {(c.model_name, c.model_version, c.producer) for c in calls} == {
        ("agent-lm", 4, "rollouts/test")
    }
    assert all(c.session_id is None and c.event_time == result.event_time for c in calls)
    assert len({c.event_id for c in calls}) == 4
    resent = _result(trace)  # a redelivered task: the same ids
    assert resent.event_id == result.event_id
    assert [c.event_id for c in tool_call_events(trace, resent)] == [c.event_id for c in calls]
    assert result.event_id not in {c.event_id for c in calls}
    assert _round_trip(read)["arguments"] == '{"path":"text.py"}'


def test_privacy_mode_withholds_arguments_and_text_but_keeps_the_measures() -> None:
    trace = _trace()
    result = _result(trace, privacy_mode=True)
    assert result.completion_text is None and result.completion_mask == trace.mask
    calls = tool_call_events(trace, result, privacy_mode=True)
    assert [c.arguments for c in calls] == [None] * 4
    assert [c.observation_bytes for c in calls] == [30, 900, 19, 0]


class _Repository:
    """A multi-turn environment in name only: the patched runner never opens an episode."""

    name = "repository"
    tools: Sequence[dict[str, Any]] = ()
    system = "fix it"
    extra_eval = "none"

    def held_out(self, task: Task) -> bool:
        return False

    def cluster(self, task: Task) -> str:
        return task.task_id

    def episode(self, task: Task, limits: EpisodeLimits | None = None) -> Episode:
        raise AssertionError("the runner is patched")

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        return [Task(f"repo-{i}", self.name, 1, "{}") for i in range(n)]


class _Subscriber:
    model_name = "agent-lm"

    def route(self, _key: str) -> Routed[AgentPolicy]:
        return Routed(Channel.PRODUCTION, 4, AgentPolicy(model=None, tokenizer=None))


def test_the_worker_runs_a_multi_turn_task_as_a_group_of_episodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    def run_episodes(_model: Any, _tokenizer: Any, environment: Any, tasks: Sequence[Task],
                     params: SamplingParams, **kwargs: Any) -> list[EpisodeTrace]:  # fmt: skip
        seen.update(environment=environment, tasks=list(tasks), params=params, **kwargs)
        return [_trace(t, passed=2 * (i % 2)) for i, t in enumerate(tasks)]

    monkeypatch.setattr(rollout_worker, "run_episodes", run_episodes)
    registry = EnvironmentRegistry()
    registry.register("repository", _Repository)
    limits = EpisodeLimits(max_turns=5, max_tokens=300, wall_s=9.0)
    worker = RolloutWorker(_Subscriber(), registry, sampling=SAMPLING,  # type: ignore[arg-type]
                           producer="rollouts/test", seed=1, limits=limits)  # fmt: skip
    task = Task("repo-7", "repository", 1, "{}")
    batch = worker.run_batch([TaskRequest(task, group_size=3, group_id="g-7")])
    assert seen["tasks"] == [task] * 3 and seen["limits"] == limits and seen["params"] == SAMPLING
    assert isinstance(seen["environment"], _Repository)
    assert len(batch.results) == 3 and len(batch.tool_calls) == 3 * 4
    assert {r.group_id for r in batch.results} == {"g-7"}
    assert {r.model_version for r in batch.results} == {4}
    assert len({r.rollout_id for r in batch.results}) == 3
    assert {c.rollout_id for c in batch.tool_calls} == {r.rollout_id for r in batch.results}
    assert (worker.stats.trials, worker.stats.passed, worker.stats.tool_calls) == (3, 1, 9)
    assert worker.stats.generated_tokens == 3 * 11
    again = worker.run_batch([TaskRequest(task, group_size=3, group_id="g-7")])
    assert [r.rollout_id for r in again.results] == [r.rollout_id for r in batch.results]
    assert [c.event_id for c in again.tool_calls] == [c.event_id for c in batch.tool_calls]
