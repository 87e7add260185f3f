"""The program-synthesis environment: seeded pools, a held-out eval set, hidden tests."""

from __future__ import annotations

import json
import random

import pytest

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import score_all
from environments.errors import TaskEnvironmentError
from environments.program_synthesis import MAX_DEPTH, ProgramSynthesis, Spec, apply, solution


@pytest.fixture(scope="module")
def env() -> ProgramSynthesis:
    return ProgramSynthesis(eval_size=50)


def test_registered_by_name() -> None:
    assert isinstance(ENVIRONMENTS.get(PROGRAM_SYNTHESIS), ProgramSynthesis)
    with pytest.raises(TaskEnvironmentError, match="program-synthesis"):
        ENVIRONMENTS.get("nope")


def test_pools_are_seeded_and_eval_is_held_out(env: ProgramSynthesis) -> None:
    assert env.tasks("train", 20, seed=3) == env.tasks("train", 20, seed=3)
    assert env.tasks("train", 20, seed=3) != env.tasks("train", 20, seed=4)
    held_out = {t.task_id for t in env.tasks("eval", 50)}
    assert len(held_out) == 50
    assert not held_out & {t.task_id for t in env.tasks("train", 2000, seed=0)}
    rng = random.Random(1)
    assert all(env.task(rng, d).difficulty == d for d in range(1, MAX_DEPTH + 1))


def test_the_prompt_shows_examples_never_the_hidden_tests(env: ProgramSynthesis) -> None:
    for task in env.tasks("train", 30, seed=5):
        spec = Spec.from_json(task.spec)
        prompt = env.reset(task)
        assert len(spec.ops) == task.difficulty
        for x in spec.examples:
            assert f"# f({json.dumps(x)}) == {json.dumps(apply(spec.ops, x))}" in prompt
        for x in spec.tests:
            assert f"f({json.dumps(x)})" not in prompt
        assert prompt.endswith("def f(x):\n")


def test_the_reference_solution_passes_and_wrong_ones_do_not(env: ProgramSynthesis) -> None:
    tasks = env.tasks("train", 6, seed=7)
    trials = [(env, t, env.solution(t)) for t in tasks]
    trials += [(env, t, "    return x\n") for t in tasks]
    trials += [(env, t, "return x\n") for t in tasks]  # not indented: a syntax error
    scores = score_all(trials)
    assert all(s.passed and s.components == {"tests": 1.0} for s in scores[:6])
    assert all(s.status == "syntax_error" and s.reward == 0.0 for s in scores[12:])
    assert sum(s.passed for s in scores[6:12]) < 6  # identity solves few tasks


def test_a_bad_spec_names_the_problem(env: ProgramSynthesis) -> None:
    task = env.tasks("train", 1)[0]
    bad = type(task)(task.task_id, task.environment, 1, '{"kind": "str", "ops": ["rm_rf"]}')
    with pytest.raises(TaskEnvironmentError, match="spec"):
        env.reset(bad)
    assert solution(("reverse", "upper")) == "    return upper(reverse(x))\n"
