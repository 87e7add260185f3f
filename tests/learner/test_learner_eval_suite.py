"""The eval suite dispatches on the environment: whole greedy episodes for a multi-turn one (pass
= the episode's final score), one completion per task for a single-shot one."""

from __future__ import annotations

import json

import numpy as np

from environments.base import Score, Split, Task
from environments.episodes import EpisodeLimits
from learner.eval_suite import EvalConfig, evaluate
from tests.environments.counter_world import CounterWorld, tiny_chat_lm


class EchoWorld:
    """Single-shot: a completion passes when it is not empty."""

    name = "echo"
    extra_eval = "none"

    def held_out(self, task: Task) -> bool:
        return False

    def cluster(self, task: Task) -> str:
        return task.task_id

    def reset(self, task: Task) -> str:
        return "Say something: "

    def score(self, task: Task, completion: str) -> Score:
        return Score({"tests": float(bool(completion))}, int(bool(completion)), 1, "ok")

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return [Task(f"e{i}", self.name, 1, "{}") for i in range(n)]


def test_a_multi_turn_environment_is_evaluated_on_greedy_episodes() -> None:
    model, tokenizer = tiny_chat_lm()
    world = CounterWorld()
    # Target 0 is met before any call (the score of the copy as it stands); 3 never by this model.
    tasks = [Task(f"t{t}", world.name, 1, json.dumps({"target": t})) for t in (0, 3, 0)]
    limits = EvalConfig(max_turns=2).limits()
    result = evaluate(model, tokenizer, world, tasks, max_new_tokens=6, limits=limits)
    assert result.task_ids == ("t0", "t3", "t0")
    assert result.passed.tolist() == [True, False, True]
    assert result.rewards.tolist() == [1.0, 0.0, 1.0]
    assert result.turns.tolist() == [2, 2, 2] and result.mean_turns == 2.0
    assert result.tool_calls.tolist() == [0, 0, 0]  # a random model writes no call
    assert all(e.closed for e in world.opened)
    again = evaluate(model, tokenizer, world, tasks, max_new_tokens=6, limits=EpisodeLimits(2))
    assert np.array_equal(again.passed, result.passed)


def test_a_single_shot_environment_is_one_completion_per_task() -> None:
    model, tokenizer = tiny_chat_lm()
    env = EchoWorld()
    result = evaluate(model, tokenizer, env, env.tasks("eval", 3), max_new_tokens=4)
    assert result.pass_at_1 == 1.0 and result.statuses == ("ok",) * 3
    assert result.turns.tolist() == [1, 1, 1] and result.tool_calls.tolist() == [0, 0, 0]
