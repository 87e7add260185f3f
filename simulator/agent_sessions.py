"""One simulated user's multi-turn tool session through the OpenAI API (issue 36).

The user works on their own copy of a repository task (``environments.repository``: a private
writable copy, code run only in the sandbox) and lets the served model drive it the way any
function-calling harness does: ``POST /v1/chat/completions`` with the conversation so far, the
environment's ``tools`` and the session's ``session_id``; each returned tool call is executed
locally (:meth:`Episode.step`) and its output goes back as a ``tool`` message naming the call's
``tool_call_id``. The session ends when the model calls ``submit``, at ``max_turns``, when the
model answers with text instead of a call (the harness has nothing to run), or when the
conversation outgrows the model's context (the API's 400 ``context_length_exceeded``): the
episode is scored then, by the hidden tests neither the user nor the model sees.

The score decides the user's reactions (``simulator.agent_users.react``), sent as
``AgentFeedback`` naming the session's **last** completion: its prompt carries the model's
earlier turns (AgentCompletion's ``prompt_mask``), so that one Reward trains the whole session
as one episode, observations masked, as a rollout's does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from environments.base import Score, Task
from environments.episodes import Ending, EpisodeLimits, MultiTurnEnvironment, Step
from policies.agent_chat import ParsedTurn, ToolCall

# (request body) -> the answer's JSON, or None when the request failed (counted by the caller)
# or the conversation no longer fits the model (the caller returns CONTEXT_FULL).
Post = Callable[[dict[str, Any]], Mapping[str, Any] | None]
CONTEXT_FULL: Mapping[str, Any] = {"context_full": True}


@dataclass(frozen=True)
class SessionResult:
    """A finished session: its score, how it ended, the last completion's id (None when no
    request was answered), the version that served it, and its turns and tool calls."""

    score: Score
    ended: Ending | str
    last_completion_id: str | None
    version: int
    turns: int
    tool_calls: int


def run_session(
    post: Post,
    environment: MultiTurnEnvironment,
    task: Task,
    request: Mapping[str, Any],
    limits: EpisodeLimits,
) -> SessionResult:
    """Drive one episode of ``task`` through ``post``; ``request`` holds the body fields every
    turn sends (model, temperature, max_tokens, user, session_id)."""
    episode = environment.episode(task, limits)
    try:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": environment.system},
            {"role": "user", "content": episode.reset()},
        ]
        last_id: str | None = None
        version = turns = calls = 0
        final: Step | None = None
        ended: Ending | str = "max_turns"
        while final is None and turns < limits.max_turns:
            answer = post({**request, "messages": messages, "tools": list(environment.tools)})
            if answer is None or answer is CONTEXT_FULL:
                ended = "max_tokens" if answer is CONTEXT_FULL else "error"
                break
            turns += 1
            last_id = _completion_id(answer)
            version = int(answer.get("flywheel", {}).get("version", 0))
            message = answer["choices"][0]["message"]
            call = _first_call(message)
            if call is None:  # text, no call: the harness has nothing to run
                ended = "no_tool_call"
                break
            calls += 1
            messages.append(_assistant(message))
            step = episode.step(ParsedTurn(message.get("content") or "", call))
            if step.done:
                final = step
            else:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": step.observation})  # fmt: skip
        if final is None:
            final = episode.finish("max_tokens" if ended == "max_tokens" else "max_turns")
        assert final.score is not None  # a finished episode is scored
        if final.ended == "submitted":
            ended = "submitted"
        return SessionResult(final.score, ended, last_id, version, turns, calls)
    finally:
        episode.close()


def _completion_id(answer: Mapping[str, Any]) -> str:
    ids = answer.get("flywheel", {}).get("completion_ids") or [f"{answer['id']}:0"]
    return str(ids[0])


def _first_call(message: Mapping[str, Any]) -> ToolCall | None:
    """The first tool call of an assistant message; None without one (or with arguments that
    are not a JSON object: the API never returns such, but a harness checks)."""
    for raw in message.get("tool_calls") or ():
        function = raw.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            return None
        if isinstance(arguments, dict) and function.get("name"):
            return ToolCall(function["name"], arguments, raw.get("id", ""))
        return None
    return None


def _assistant(message: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message as the client sends it back: content and tool calls only."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = list(message["tool_calls"])
    return out
