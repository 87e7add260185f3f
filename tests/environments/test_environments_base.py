"""The training-task stream: seeded, endless, drawn by the environment's own sampler if any."""

from __future__ import annotations

from itertools import islice

import pytest

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import EnvironmentRegistry, Score, Split, Task, training_tasks
from environments.errors import TaskEnvironmentError


class _PoolOnly:
    """An environment without ``task(rng, difficulty)``: its train split, one seed per task."""

    name = "pool-only"

    def reset(self, task: Task) -> str:
        return task.spec

    def score(self, task: Task, completion: str) -> Score:
        return Score({}, 0, 0, "ok")

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return [Task(f"{split}-{seed}-{i}", self.name, 1, "{}") for i in range(n)]


def test_the_same_seed_gives_the_same_tasks_at_the_asked_difficulties() -> None:
    first = list(islice(training_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, seed=5), 12))
    assert first == list(islice(training_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, seed=5), 12))
    assert first != list(islice(training_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, seed=6), 12))
    easy = islice(training_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, 5, difficulties=(1,)), 12)
    assert {t.difficulty for t in easy} == {1}


def test_an_environment_without_a_sampler_yields_its_train_split_task_by_task() -> None:
    registry = EnvironmentRegistry()
    registry.register("pool-only", _PoolOnly)
    ids = [t.task_id for t in islice(training_tasks(registry, "pool-only", seed=2), 3)]
    assert ids == ["train-2000006-0", "train-2000007-0", "train-2000008-0"]


def test_an_unknown_environment_fails_on_the_first_draw() -> None:
    tasks = training_tasks(EnvironmentRegistry(), "nope", seed=0)
    with pytest.raises(TaskEnvironmentError, match="nope"):
        next(tasks)
