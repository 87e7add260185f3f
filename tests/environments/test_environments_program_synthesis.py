"""The program-synthesis environment: seeded pools, a held-out eval set, hidden tests."""

from __future__ import annotations

import json
import random

import pytest

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import score_all
from environments.errors import TaskEnvironmentError
from environments.program_synthesis import (
    HEADER,
    MAX_DEPTH,
    OPERATIONS,
    PRELUDE,
    ProgramSynthesis,
    Spec,
    apply,
    composition,
    solution,
)
from environments.sandbox import run_program


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


def test_compositions_are_scored_without_running_them_and_agree_with_the_sandbox(
    env: ProgramSynthesis,
) -> None:
    task = env.task(random.Random(3), 2)
    kind, ops = Spec.from_json(task.spec).kind, OPERATIONS[Spec.from_json(task.spec).kind]
    names = sorted(ops)
    candidates = [env.solution(task), "    return x\n", f"    return {names[0]}(x)\n",
                  f"    return {names[1]}({names[0]}(x))\n"]  # fmt: skip
    for completion in candidates:
        assert composition(completion, kind) is not None
        trusted = env.score(task, completion)
        spec = Spec.from_json(task.spec)
        run = run_program(HEADER + completion, "f", spec.tests, prelude=PRELUDE)
        expected = [repr(apply(spec.ops, x)) for x in spec.tests]
        assert trusted.tests_passed == sum(
            o == e for o, e in zip(run.outputs, expected, strict=True)
        )
        assert trusted.status == run.status == "ok"
    # anything but nested calls of the kind's own operations on x goes to the sandbox
    other = next(k for k in OPERATIONS if k != kind)
    for completion in [f"    return {sorted(OPERATIONS[other])[0]}(x)\n", "    return x[::-1]\n",
                       "    import os\n    return x\n", "    return open('x')\n",
                       "    return " + "(".join([names[0]] * 7) + "(x" + ")" * 7 + "\n",
                       "return x\n", f"    return {names[0]}(x, x)\n"]:  # fmt: skip
        assert composition(completion, kind) is None


def test_a_bad_spec_names_the_problem(env: ProgramSynthesis) -> None:
    task = env.tasks("train", 1)[0]
    bad = type(task)(task.task_id, task.environment, 1, '{"kind": "str", "ops": ["rm_rf"]}')
    with pytest.raises(TaskEnvironmentError, match="spec"):
        env.reset(bad)
    assert solution(("reverse", "upper")) == "    return upper(reverse(x))\n"
