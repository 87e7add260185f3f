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
    extra_eval = "none"

    def reset(self, task: Task) -> str:
        return task.spec

    def score(self, task: Task, completion: str) -> Score:
        return Score({}, 0, 0, "ok")

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return [Task(f"{split}-{seed}-{i}", self.name, 1, "{}") for i in range(n)]

    def held_out(self, task: Task) -> bool:
        return task.task_id.endswith("7-0")  # holds out one train task to prove it is skipped

    def cluster(self, task: Task) -> str:
        return task.task_id


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
    assert ids == ["train-2000006-0", "train-2000008-0", "train-2000009-0"]  # 7: held out


class _Episodic:
    """A multi-turn environment in the registry's eyes: no reset/score, no held_out."""

    name = "episodic"


def test_get_is_single_turn_and_an_environment_without_held_out_never_trains() -> None:
    registry = EnvironmentRegistry()
    registry.register("episodic", _Episodic)  # type: ignore[arg-type]  # deliberately incomplete
    assert isinstance(registry.get_any("episodic"), _Episodic)
    with pytest.raises(TaskEnvironmentError, match="multi-turn"):
        registry.get("episodic")
    with pytest.raises(TaskEnvironmentError, match="held out"):
        next(training_tasks(registry, "episodic", seed=0))


def test_an_environment_that_draws_only_held_out_tasks_fails_loudly() -> None:
    class _AllHeldOut(_PoolOnly):
        def held_out(self, task: Task) -> bool:
            return True

    registry = EnvironmentRegistry()
    registry.register("all", _AllHeldOut)
    with pytest.raises(TaskEnvironmentError, match="held-out"):
        next(training_tasks(registry, "all", seed=0))


def test_an_unknown_environment_fails_on_the_first_draw() -> None:
    tasks = training_tasks(EnvironmentRegistry(), "nope", seed=0)
    with pytest.raises(TaskEnvironmentError, match="nope"):
        next(tasks)
