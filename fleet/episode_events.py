"""Episodes as events (DESIGN §12, "Repositories with tools"): one ``RolloutResult`` per
:class:`~environments.episode_runner.EpisodeTrace` and one ``ToolCallObserved`` per turn.

An episode's ``RolloutResult`` carries its whole conversation as tokens: the prompt, then the
completion (every turn the policy wrote and every tool observation, in order) with
``completion_mask`` 1 on the generated tokens and 0 on the observations, and one behaviour
log-prob per completion token (0.0 on observations), so the learner trains the policy's tokens
only. ``prompt_tokens`` counts what the model read (the prompt and the observations),
``completion_tokens`` what it generated.

A turn's ``ToolCallObserved`` says which tool ran, how it went, how long it took and how big its
arguments and output were. Event ids derive from the rollout id (and the turn), so a redelivered
task (whose rollout ids are derived too) re-sends the same ids and the lake's views keep the
first delivery of the episode and of its calls alike. Privacy mode withholds the
arguments and the completion text (paths, queries and edited code); sizes and statuses stay.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from environments.episode_runner import EpisodeTrace
from policies.agent_sampling import SamplingParams
from schemas.events import RolloutResult, ToolCallObserved

_EVENT_IDS = uuid.UUID("0b7f3c1e-5a44-4f5e-8d7c-3f2a9e6b1d20")  # namespace of derived event ids


def episode_result(
    trace: EpisodeTrace,
    *,
    producer: str,
    rollout_id: str,
    group_id: str,
    model_name: str,
    model_version: int,
    sampling: SamplingParams,
    privacy_mode: bool = False,
) -> RolloutResult:
    """The ``RolloutResult`` of one episode (``sampling.max_new_tokens`` bounds each turn)."""
    generated = sum(trace.mask)
    score = trace.score
    return RolloutResult(
        event_id=str(uuid.uuid5(_EVENT_IDS, rollout_id)),
        producer=producer,
        rollout_id=rollout_id,
        task_id=trace.task.task_id,
        group_id=group_id,
        model_name=model_name,
        model_version=model_version,
        prompt_tokens=len(trace.prompt_ids) + len(trace.completion_ids) - generated,
        completion_tokens=generated,
        tool_calls=trace.tool_calls,
        tests_passed=score.tests_passed,
        tests_total=score.tests_total,
        reward_components=dict(score.components),
        behaviour_logprobs=trace.logprobs,
        duration_ms=trace.duration_ms,
        environment=trace.task.environment,
        difficulty=trace.task.difficulty,
        prompt_token_ids=trace.prompt_ids,
        completion_token_ids=trace.completion_ids,
        completion_text=None if privacy_mode else trace.completion_text(),
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_new_tokens=sampling.max_new_tokens,
        sandbox_status=score.status,
        sandbox_reason=score.reason or None,
        turns=trace.turns,
        completion_mask=trace.mask,
    )


def tool_call_events(
    trace: EpisodeTrace, result: RolloutResult, *, privacy_mode: bool = False
) -> list[ToolCallObserved]:
    """One event per turn of ``trace`` (``result`` is its ``RolloutResult``: ids, model,
    time). Turns count from 1; ``arguments`` is the call's compact JSON (None in privacy mode
    or for a turn with no readable call)."""
    arguments = turn_arguments(trace)
    events = []
    for index, outcome in enumerate(trace.outcomes):
        turn = index + 1
        events.append(
            ToolCallObserved(
                event_id=str(uuid.uuid5(_EVENT_IDS, f"{result.rollout_id}/{turn}")),
                event_time=result.event_time,
                producer=result.producer,
                rollout_id=result.rollout_id,
                task_id=result.task_id,
                group_id=result.group_id,
                model_name=result.model_name,
                model_version=result.model_version,
                turn=turn,
                tool=outcome.tool,
                status=outcome.status,
                duration_ms=outcome.duration_ms,
                arguments_bytes=outcome.arguments_bytes,
                observation_bytes=outcome.observation_bytes,
                truncated=outcome.truncated,
                arguments=None if privacy_mode else arguments[index],
            )
        )
    return events


def turn_arguments(trace: EpisodeTrace) -> list[str | None]:
    """Per outcome, the arguments of its turn's call as compact JSON: the n-th assistant message
    of the conversation is the n-th turn; None where it holds no tool call."""
    turns = [m for m in trace.messages if m.get("role") == "assistant"]
    out: list[str | None] = []
    for index in range(len(trace.outcomes)):
        calls = turns[index].get("tool_calls") if index < len(turns) else None
        out.append(_arguments_json(calls[0]) if calls else None)
    return out


def _arguments_json(call: Mapping[str, Any]) -> str:
    """An OpenAI tool call's arguments as compact JSON (the API sends a JSON string; a
    mapping is dumped the way ``policies.agent_chat.ToolCall`` writes it)."""
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        return arguments
    return json.dumps(dict(arguments), separators=(",", ":"), ensure_ascii=False)
