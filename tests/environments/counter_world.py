"""A toy multi-turn environment for tests: a counter (``add(n)`` then ``submit()``, reward when
the total hits the task's target), an expert for it, and a tiny random chat model."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from environments.base import Score, Split, Task
from environments.episodes import Ending, EpisodeLimits, Step, ToolOutcome
from policies.agent_chat import ParsedTurn, ToolCall
from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer

TOOLS = [
    {"type": "function", "function": {"name": "add", "parameters": {"properties": {"n": {}}}}},
    {"type": "function", "function": {"name": "submit", "parameters": {"properties": {}}}},
]  # fmt: skip


class CounterEpisode:
    def __init__(self, task: Task, limits: EpisodeLimits, explode: bool = False) -> None:
        self.task, self.limits, self.explode = task, limits, explode
        self.target = json.loads(task.spec)["target"]
        self.total = self.turns = 0
        self.closed = False

    def reset(self) -> str:
        return f"Make the total {self.target}, then submit."

    def step(self, action: ParsedTurn) -> Step:
        if self.explode:
            raise RuntimeError("the tool crashed")
        self.turns += 1
        call = action.call
        status: Any = "ok"
        if call is None:
            observation, status = f"error: {action.error}", "malformed"
        elif call.name == "add" and isinstance(call.arguments.get("n"), int):
            self.total += call.arguments["n"]
            observation = f"total {self.total} ✓"
        elif call.name == "submit":
            return self._end("submitted", call.name)
        else:
            observation, status = f"error: cannot call {call.name}", "unknown_tool"
        outcome = ToolOutcome(self.turns, call.name if call else "", status, 0, 0, 0, False)
        if self.turns >= self.limits.max_turns:
            return self._end("max_turns", outcome.tool)
        return Step(observation, 0.0, False, outcome)

    def finish(self, ended: Ending) -> Step:
        return self._end(ended, "")

    def close(self) -> None:
        self.closed = True

    def _end(self, ended: Ending, tool: str) -> Step:
        hit = self.total == self.target
        score = Score({"tests": float(hit)}, int(hit), 1, "ok")
        outcome = ToolOutcome(self.turns, tool, "ok", 0, 0, 0, False)
        return Step("done", score.reward, True, outcome, score, ended)


class CounterWorld:
    name = "counter"
    tools: Sequence[Mapping[str, Any]] = TOOLS
    system = "Count."
    extra_eval = "none"

    def __init__(self, explode: bool = False) -> None:
        self.opened: list[CounterEpisode] = []
        self.explode = explode

    def episode(self, task: Task, limits: EpisodeLimits | None = None) -> CounterEpisode:
        self.opened.append(CounterEpisode(task, limits or EpisodeLimits(), self.explode))
        return self.opened[-1]

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        targets = [3, 12, 123456, 7, 45][:n]  # different prompt lengths: left padding
        return [Task(f"t{t}", self.name, 1, json.dumps({"target": t})) for t in targets]

    def held_out(self, task: Task) -> bool:
        return False

    def cluster(self, task: Task) -> str:
        return task.task_id

    def expert_action(self, task: Task, history: Sequence[tuple[ToolCall, str]]) -> ToolCall:
        if history:
            return ToolCall("submit")
        return ToolCall("add", {"n": json.loads(task.spec)["target"], "why": "déjà ✓"})


def tiny_chat_lm() -> tuple[Any, Any]:
    """A chat tokenizer and a random model whose turns vary (malformed: no valid calls)."""
    corpus = [f'<tool_call>{{"name":"add","arguments":{{"n":{i}}}}}</tool_call> total {i}'
              for i in range(200)]  # fmt: skip
    tokenizer = train_tokenizer(corpus, 300, chat=True)
    torch.manual_seed(0)
    config = AgentModelConfig(hidden_size=32, layers=2, heads=2, kv_heads=1,
                              intermediate_size=64, vocab_size=300)  # fmt: skip
    model = build_model(config, tokenizer).eval()
    with torch.no_grad():  # wider than the initial 0.02: varied turns, partial UTF-8 included
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.normal_(0.0, 0.3)
    return model, tokenizer
