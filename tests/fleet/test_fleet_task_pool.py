"""The rollout worker's pooled tasks are the environment's training tasks, one group each."""

from __future__ import annotations

from itertools import islice

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import training_tasks
from fleet.rollout_worker import pool_tasks


def test_pooled_tasks_are_the_training_tasks_in_groups_of_the_asked_size() -> None:
    pooled = list(islice(pool_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, 4, seed=11), 6))
    expected = list(islice(training_tasks(ENVIRONMENTS, PROGRAM_SYNTHESIS, seed=11), 6))
    assert [r.task for r in pooled] == expected
    assert {r.group_size for r in pooled} == {4}
    assert len({r.group_id for r in pooled}) == 6
