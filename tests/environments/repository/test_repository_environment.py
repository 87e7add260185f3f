"""The repository environment's pools: the held-out split is enforced by construction (no eval
instance, no eval-only template or bug kind in any training pool), the held-out sets are fixed,
and the environment is what the episode machinery expects."""

from __future__ import annotations

import random

import pytest

from environments import ENVIRONMENTS, REPOSITORY
from environments.base import Task
from environments.episodes import ExpertDemonstrator, MultiTurnEnvironment
from environments.errors import TaskEnvironmentError
from environments.repository.environment import RepositoryEnvironment, source_key
from environments.repository.spec import RepoSpec
from environments.repository.templates import EVAL_BUGS, EVAL_TEMPLATES, TRAIN_BUGS, TRAIN_TEMPLATES


@pytest.fixture(scope="module")
def env() -> RepositoryEnvironment:
    return RepositoryEnvironment()


def _spec(task: Task) -> RepoSpec:
    return RepoSpec.from_json(task.spec)


def test_training_never_draws_an_eval_instance_an_eval_template_or_an_eval_bug(
    env: RepositoryEnvironment,
) -> None:
    held_out = env.tasks("eval", 300) + env.tasks("eval_extra", 300)
    held_out_ids = {t.task_id for t in held_out}
    held_out_sources = {source_key(_spec(t)) for t in held_out}
    rng = random.Random(0)
    drawn = [env.task(rng, 1 + i % 3) for i in range(5000)] + env.tasks("train", 300, seed=4)
    for task in drawn:
        spec = _spec(task)
        assert task.task_id == spec.instance_id and task.task_id not in held_out_ids
        assert source_key(spec) not in held_out_sources
        assert spec.template in TRAIN_TEMPLATES and set(spec.bugs) <= set(TRAIN_BUGS)
        assert not env.held_out(task)
    assert {_spec(t).template for t in drawn} == set(TRAIN_TEMPLATES)
    assert {b for t in drawn for b in _spec(t).bugs} == set(TRAIN_BUGS)


def test_a_training_draw_that_equals_an_eval_instance_is_drawn_again(
    env: RepositoryEnvironment,
) -> None:
    # The eval set's first task is drawn from this seed at level 1: a pool without held-out
    # tasks draws it again from the same seed; the environment refuses it.
    first = env.tasks("eval", 1)[0]
    unguarded = RepositoryEnvironment(eval_size=0, extra_size=0)
    assert unguarded.task(random.Random("repo-eval-0"), 1).task_id == first.task_id
    assert env.task(random.Random("repo-eval-0"), 1).task_id != first.task_id
    assert env.held_out(first)


def test_eval_and_eval_extra_are_fixed_disjoint_and_held_out(env: RepositoryEnvironment) -> None:
    evals, extras = env.tasks("eval", 300), env.tasks("eval_extra", 300)
    other = RepositoryEnvironment()
    assert [t.task_id for t in evals] == [t.task_id for t in other.tasks("eval", 300, seed=9)]
    assert [t.task_id for t in extras] == [t.task_id for t in other.tasks("eval_extra", 300)]
    assert not {t.task_id for t in evals} & {t.task_id for t in extras}
    assert len({t.task_id for t in evals}) == 300 and len({t.task_id for t in extras}) == 300
    for task in evals:  # unseen instances of what training draws
        spec = _spec(task)
        assert spec.template in TRAIN_TEMPLATES and set(spec.bugs) <= set(TRAIN_BUGS)
        assert env.held_out(task)
    for task in extras:  # an eval-only template or bug kind in each
        spec = _spec(task)
        assert spec.template in EVAL_TEMPLATES or set(spec.bugs) & set(EVAL_BUGS)
        assert env.held_out(task)
    assert {_spec(t).template for t in extras} >= set(EVAL_TEMPLATES)
    assert {t.difficulty for t in evals} == {t.difficulty for t in extras} == {1, 2, 3}


def test_a_task_of_an_eval_only_template_is_held_out_wherever_it_came_from(
    env: RepositoryEnvironment,
) -> None:
    task = next(t for t in env.tasks("eval_extra", 300) if _spec(t).template in EVAL_TEMPLATES)
    renamed = Task("repo-forged", task.environment, task.difficulty, task.spec)
    assert env.held_out(renamed)
    # An eval instance with other test inputs is the same instance: its sources are held out.
    first = env.tasks("eval", 1)[0]
    spec = _spec(first)
    visible = spec.files[spec.test_file].replace("assert", "assert True or")
    other = RepoSpec(spec.template, spec.bugs, spec.level, {**spec.files, spec.test_file: visible},
                     spec.hidden[1:], spec.fixed, spec.test_file)  # fmt: skip
    assert other.instance_id != first.task_id
    assert env.held_out(Task(other.instance_id, "repository", spec.level, other.to_json()))
    with pytest.raises(TaskEnvironmentError):
        env.held_out(Task("x", "repository", 1, "{}"))


def test_splits_are_seeded_levels_checked_and_sizes_bounded(env: RepositoryEnvironment) -> None:
    assert env.tasks("train", 5, seed=1) == env.tasks("train", 5, seed=1)
    assert env.tasks("train", 5, seed=1) != env.tasks("train", 5, seed=2)
    assert {env.task(random.Random(2), level).difficulty for level in (1, 2, 3)} == {1, 2, 3}
    with pytest.raises(TaskEnvironmentError):
        env.task(random.Random(0), 4)
    with pytest.raises(TaskEnvironmentError):
        env.tasks("eval", 301)


def test_clusters_are_templates(env: RepositoryEnvironment) -> None:
    for task in env.tasks("eval", 30):
        assert env.cluster(task) == _spec(task).template
    with pytest.raises(TaskEnvironmentError):
        env.cluster(Task("ps-1", "program-synthesis", 1, "{}"))


def test_it_is_registered_and_is_a_multi_turn_expert_environment() -> None:
    env = ENVIRONMENTS.get_any(REPOSITORY)
    assert isinstance(env, RepositoryEnvironment) and env.name == REPOSITORY
    assert isinstance(env, MultiTurnEnvironment) and isinstance(env, ExpertDemonstrator)
    assert [t["function"]["name"] for t in env.tools] == [
        "read_file", "search", "edit", "run_tests", "submit",
    ]  # fmt: skip
    assert env.extra_eval == "unseen templates"
