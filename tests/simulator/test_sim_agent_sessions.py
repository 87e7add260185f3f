"""A simulated user's tool session, driven by a scripted server that answers as the
repository environment's expert would (the API itself is tested in tests/fleet/)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from environments import ENVIRONMENTS, REPOSITORY
from environments.episodes import EpisodeLimits
from environments.repository.environment import RepositoryEnvironment
from policies.agent_chat import ToolCall
from simulator.agent_sessions import CONTEXT_FULL, run_session

REQUEST = {"model": "agent-lm", "temperature": 0.6, "max_tokens": 64, "session_id": "s-1"}


def _environment() -> RepositoryEnvironment:
    environment = ENVIRONMENTS.get_any(REPOSITORY)
    assert isinstance(environment, RepositoryEnvironment)
    return environment


def _answer(n: int, call: ToolCall | None, text: str = "") -> dict[str, Any]:
    calls = [] if call is None else [ToolCall(call.name, call.arguments, f"call_{n}").openai()]
    message = {"role": "assistant", "content": text or None, "tool_calls": calls or None}
    return {"id": f"chatcmpl-{n}", "choices": [{"index": 0, "message": message}],
            "flywheel": {"version": 3, "completion_ids": [f"chatcmpl-{n}:0"]}}  # fmt: skip


def test_a_session_runs_the_returned_tool_calls_until_submit() -> None:
    environment = _environment()
    task = environment.task(random.Random(1), 1)
    bodies: list[Mapping[str, Any]] = []
    history: list[tuple[ToolCall, str]] = []

    def expert(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        if len(body["messages"]) > 2:  # the last tool result answers the last call
            calls = body["messages"][-2]["tool_calls"]
            assert body["messages"][-1]["tool_call_id"] == calls[0]["id"]
            history.append((history_call[0], body["messages"][-1]["content"]))
        call = environment.expert_action(task, history)
        history_call[:] = [call]
        return _answer(len(bodies), call)

    history_call: list[ToolCall] = []
    result = run_session(expert, environment, task, REQUEST, EpisodeLimits())
    assert result.ended == "submitted" and result.score.passed
    assert result.turns == result.tool_calls == len(bodies) >= 3
    assert result.last_completion_id == f"chatcmpl-{len(bodies)}:0" and result.version == 3
    assert all(b["session_id"] == "s-1" and b["tools"] for b in bodies)
    assert bodies[0]["messages"][0]["role"] == "system"


def test_text_instead_of_a_call_or_a_full_context_ends_the_session_scored() -> None:
    environment = _environment()
    task = environment.task(random.Random(2), 1)
    text = run_session(lambda body: _answer(1, None, "I am done."), environment, task, REQUEST,
                       EpisodeLimits())  # fmt: skip
    assert (text.ended, text.turns, text.tool_calls) == ("no_tool_call", 1, 0)
    assert not text.score.passed  # nothing was fixed
    full = run_session(lambda body: CONTEXT_FULL, environment, task, REQUEST, EpisodeLimits())
    assert (full.ended, full.last_completion_id, full.turns) == ("max_tokens", None, 0)
    calls = iter([ToolCall("run_tests", {}), ToolCall("run_tests", {})])
    limited = run_session(lambda body: _answer(1, next(calls)), environment, task, REQUEST,
                          EpisodeLimits(max_turns=2))  # fmt: skip
    assert (limited.ended, limited.turns) == ("max_turns", 2)
