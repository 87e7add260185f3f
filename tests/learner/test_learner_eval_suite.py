"""The eval suite dispatches on the environment: whole greedy episodes for a multi-turn one (pass
= the episode's final score), one completion per task for a single-shot one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from environments.base import Score, Split, Task
from environments.episode_runner import EpisodeTrace, run_episodes
from environments.episodes import EpisodeLimits
from learner import eval_suite
from learner.eval_suite import (
    EvalConfig,
    EvalResult,
    evaluate,
    load_evals,
    pass_at_k,
    sample_trials,
    sampled_pass_at_k,
    save_evals,
)
from policies.agent_sampling import SamplingParams
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


def test_sampled_trials_of_episodes_come_task_by_task_with_their_masks() -> None:
    model, tokenizer = tiny_chat_lm()
    world = CounterWorld()
    tasks = world.tasks("train", 2)
    limits = EpisodeLimits(max_turns=2, max_tokens=200)
    trials = sample_trials(model, tokenizer, world, tasks, 3, SamplingParams(1.0, 1.0, 8),
                           limits=limits, seed=4)  # fmt: skip
    assert [t.task for t in trials] == [tasks[0]] * 3 + [tasks[1]] * 3
    for trial in trials:
        assert len(trial.mask) == len(trial.completion_ids) == len(trial.logprobs)
        assert 1 in trial.mask and 1 <= trial.turns <= 2
        assert all(lp == 0.0 for lp, m in zip(trial.logprobs, trial.mask, strict=True) if not m)


def test_sampled_episodes_run_in_lock_step_chunks_as_a_worker_runs_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an episode's wall time is its whole batch's: all of a study's episodes at once ran past it
    batches: list[int] = []

    def recorded(*args: Any, **kwargs: Any) -> list[EpisodeTrace]:
        batches.append(len(args[3]))
        return run_episodes(*args, **kwargs)

    monkeypatch.setattr(eval_suite, "GREEDY_BATCH", 4)
    monkeypatch.setattr(eval_suite, "run_episodes", recorded)
    model, tokenizer = tiny_chat_lm()
    world = CounterWorld()
    tasks = world.tasks("train", 2)
    trials = sample_trials(model, tokenizer, world, tasks, 3, SamplingParams(1.0, 1.0, 8),
                           limits=EpisodeLimits(max_turns=1, max_tokens=200), seed=4)  # fmt: skip
    assert batches == [4, 2]
    assert [t.task for t in trials] == [tasks[0]] * 3 + [tasks[1]] * 3


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k([0, 8], 8, 1) == 0.5
    assert pass_at_k([1], 8, 8) == 1.0  # one correct of 8: any 8 of 8 hold it
    assert abs(pass_at_k([1], 8, 2) - 0.25) < 1e-12  # 1 - C(7,2)/C(8,2) = 1 - 21/28
    model, tokenizer = tiny_chat_lm()
    world = CounterWorld()
    tasks = [Task("t0", world.name, 1, json.dumps({"target": 0}))]  # met before any call
    rates = sampled_pass_at_k(
        model,
        tokenizer,
        world,
        tasks,
        4,
        (1, 4, 8),
        SamplingParams(1.0, 1.0, 6),
        limits=EpisodeLimits(max_turns=1),
    )
    assert rates == {1: 1.0, 4: 1.0}  # k above the samples is left out


def test_kept_eval_results_come_back_only_for_the_same_settings(tmp_path: Path) -> None:
    result = EvalResult(("a", "b"), np.asarray([True, False]), np.asarray([1.5, 0.2]),
                        ("ok", "timeout"), np.asarray([5, 8]), np.asarray([5, 7]),
                        ("strings", "lists"), (1, 2))  # fmt: skip
    settings = EvalConfig(tasks=2, extra_tasks=0)
    save_evals(tmp_path, settings, result, None)
    kept = load_evals(tmp_path, settings)
    assert kept is not None and kept[1] is None
    back = kept[0]
    assert back.task_ids == result.task_ids and back.clusters == result.clusters
    assert back.passed.tolist() == [True, False] and back.rewards.tolist() == [1.5, 0.2]
    assert back.level_pass_at_1() == {1: 1.0, 2: 0.0} and back.turns.tolist() == [5, 8]
    assert load_evals(tmp_path, EvalConfig(tasks=3, extra_tasks=0)) is None  # other tasks
    assert load_evals(tmp_path / "none", settings) is None
