"""The multi-turn form of an environment: episodes of tool calls (DESIGN §12, "Repositories with
tools").

``MultiTurnEnvironment.episode(task, limits)`` opens an :class:`Episode` on a private, writable
copy of the task's world; ``reset()`` gives the first observation (the user's message), and each
``step(action)`` runs one tool call in the episode's sandbox and returns the observation, the
reward and whether the episode is done. The reward is 0 until the end: then it is the final
:class:`~environments.base.Score`'s (hidden tests), the same scale as a single-shot trial's, so
the joiner's group advantages and the eval suite treat both alike.

An action is what the model wrote in its turn, read by ``policies.agent_chat.parse_tool_call``:
a tool call, or the reason none could be read. A malformed action, an unknown tool, bad
arguments, a tool that fails — each is an observation the model sees next turn, never an
exception. Limits (turns, tokens, wall time) end the episode with the score of the copy as it
stands (``ended`` says which limit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from environments.base import Score, Task, TaskFamily
from policies.agent_chat import ParsedTurn, ToolCall

# How a tool call went (ToolCallObserved.status): ran and did what was asked; ran and reported a
# failure the model should read (a missed edit, a missing file, failing tests are still "ok":
# run_tests did its job); arguments the tool cannot take; no such tool; not a call at all;
# the tool hit its time limit.
ToolStatus = Literal["ok", "error", "bad_arguments", "unknown_tool", "malformed", "timeout"]
# Why an episode ended.
Ending = Literal["submitted", "max_turns", "max_tokens", "wall_time", "closed"]
TRUNCATION_MARKER = "\n[... truncated {hidden} more characters]"


@dataclass(frozen=True)
class EpisodeLimits:
    """Bounds of one episode. ``max_tokens`` counts the whole context (prompt, turns and
    observations); the runner checks it, the environment checks turns and wall time."""

    max_turns: int = 8
    max_tokens: int = 512
    wall_s: float = 60.0
    observation_chars: int = 480  # a tool's output beyond this is cut, with the marker


@dataclass(frozen=True)
class ToolOutcome:
    """One tool call as it happened, for the ``agent.tool_calls`` topic: sizes are of the
    arguments' JSON and of the tool's whole output (before truncation)."""

    turn: int
    tool: str  # the called name ("" when the turn held no readable call)
    status: ToolStatus
    duration_ms: int
    arguments_bytes: int
    observation_bytes: int
    truncated: bool


@dataclass(frozen=True)
class Step:
    """What one action did. ``score`` is set when ``done``: the final score (hidden tests)."""

    observation: str
    reward: float
    done: bool
    outcome: ToolOutcome
    score: Score | None = None
    ended: Ending | None = None


@runtime_checkable
class Episode(Protocol):
    """One episode on its own private copy; ``close`` removes the copy (idempotent)."""

    task: Task

    def reset(self) -> str:
        """The first observation: the user's message (the task, never the hidden tests)."""
        ...

    def step(self, action: ParsedTurn) -> Step:
        """Run ``action.call`` (or report ``action.error``); never raises for what the model
        wrote."""
        ...

    def finish(self, ended: Ending) -> Step:
        """End the episode now (a limit the runner saw: tokens) and score the copy as it is."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class MultiTurnEnvironment(TaskFamily, Protocol):
    """An environment whose tasks are episodes (its pools and held-out sets as every
    environment's: ``environments.base.TaskFamily``). ``tools`` are OpenAI tool definitions (the
    system prompt lists them; the serving API takes the same)."""

    tools: Sequence[Mapping[str, Any]]
    system: str  # the system message before the tools line

    def episode(self, task: Task, limits: EpisodeLimits | None = None) -> Episode: ...


@runtime_checkable
class ExpertDemonstrator(Protocol):
    """A multi-turn environment that can act as an expert (the warm-up's data): a scripted
    solver that decides each call from what the earlier ones showed (run the tests, read the
    failure, open the file, edit, submit). ``environments.episode_runner.expert_trace`` plays it
    through an :class:`Episode`, so expert episodes are built exactly as the model's are."""

    def expert_action(self, task: Task, history: Sequence[tuple[ToolCall, str]]) -> ToolCall:
        """The next call, given the calls so far and the observation each returned."""
        ...


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters with :data:`TRUNCATION_MARKER` when longer."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + TRUNCATION_MARKER.format(hidden=len(text) - limit), True
