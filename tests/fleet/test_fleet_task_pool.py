"""The rollout worker's pooled tasks are the environment's training tasks, one group each; the
task feed refuses held-out and unreadable tasks."""

from __future__ import annotations

from itertools import islice

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS, REPOSITORY
from environments.base import Task, training_tasks
from environments.curriculum import Curriculum
from fleet.rollout_worker import pool_tasks, record_levels, task_refusal
from schemas.events import RolloutResult


def test_pooled_tasks_are_the_training_tasks_in_groups_of_the_asked_size() -> None:
    pooled = list(islice(pool_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, 4, seed=11), 6))
    expected = list(islice(training_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, seed=11), 6))
    assert [r.task for r in pooled] == expected
    assert {r.group_size for r in pooled} == {4}
    assert len({r.group_id for r in pooled}) == 6


def test_pooled_tasks_are_never_held_out() -> None:
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    pooled = [r.task for r in islice(pool_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, 2, seed=3), 3000)]
    assert not any(env.held_out(t) for t in pooled)
    assert not {env.cluster(t) for t in pooled} & {env.cluster(t) for t in env.tasks("eval", 1000)}


def test_the_feed_refuses_held_out_and_unreadable_tasks_and_runs_training_ones() -> None:
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    training = env.tasks("train", 1, seed=2)[0]
    assert task_refusal(ENVIRONMENTS, training) is None
    for held in (env.tasks("eval", 1)[0], env.tasks("eval_extra", 1)[0]):
        refusal = task_refusal(ENVIRONMENTS, held)
        assert refusal is not None and refusal.cause == "held_out_task"
        assert held.task_id in str(refusal) and "held out" in str(refusal)
    unknown = Task("t-x", "no-such-env", 1, "{}")
    unreadable = Task("t-y", PROGRAM_SYNTHESIS, 1, '{"kind": "str"}')
    for task in (unknown, unreadable):
        refusal = task_refusal(ENVIRONMENTS, task)
        assert refusal is not None and refusal.cause == "invalid_task"


def test_a_curriculum_moves_the_pooled_levels_with_the_recorded_outcomes() -> None:
    curriculum = Curriculum()
    pooled = pool_tasks(ENVIRONMENTS, REPOSITORY, 2, seed=5, curriculum=curriculum)
    first = [next(pooled).task.difficulty for _ in range(20)]
    assert set(first) == {1}  # only level 1 is open before anything is measured

    def result(level: int, passed: bool) -> RolloutResult:
        return RolloutResult(
            producer="t", rollout_id="r", task_id="t", group_id="g", model_name="m",
            model_version=1, prompt_tokens=1, completion_tokens=1, tool_calls=0,
            tests_passed=int(passed), tests_total=1, reward_components={}, duration_ms=1,
            behaviour_logprobs=[],
            environment=REPOSITORY, difficulty=level, sandbox_status="ok",
        )  # fmt: skip

    record_levels(curriculum, [result(1, True)] * 40 + [result(1, False)] * 40)
    later = [next(pooled).task.difficulty for _ in range(200)]
    assert {1, 2} <= set(later)  # level 1 at 50% opened level 2
    record_levels(curriculum, [result(2, True)] * 60 + [result(2, False)] * 60)
    assert 3 in {next(pooled).task.difficulty for _ in range(300)}
