"""The program-synthesis environment: seeded pools, eval sets held out by program, tests."""

from __future__ import annotations

import json
import random

import pytest

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import score_all
from environments.errors import TaskEnvironmentError
from environments.program_synthesis import (
    HEADER,
    HELD_OUT,
    HELD_OUT_PROGRAMS,
    MAX_DEPTH,
    OPERATIONS,
    PRELUDE,
    TRAINING_PROGRAMS,
    ProgramSynthesis,
    Spec,
    apply,
    composition,
    program,
    solution,
)
from environments.sandbox import run_program


@pytest.fixture(scope="module")
def env() -> ProgramSynthesis:
    return ProgramSynthesis(eval_size=50)


@pytest.fixture(scope="module")
def full() -> ProgramSynthesis:
    return ProgramSynthesis()  # the default sets: 1,000 eval tasks, 1,000 eval_extra tasks


def test_registered_by_name() -> None:
    assert isinstance(ENVIRONMENTS.get(PROGRAM_SYNTHESIS), ProgramSynthesis)
    with pytest.raises(TaskEnvironmentError, match="program-synthesis"):
        ENVIRONMENTS.get("nope")


def test_pools_are_seeded_and_eval_is_held_out(env: ProgramSynthesis) -> None:
    assert env.tasks("train", 20, seed=3) == env.tasks("train", 20, seed=3)
    assert env.tasks("train", 20, seed=3) != env.tasks("train", 20, seed=4)
    held_out = {t.task_id for t in env.tasks("eval", 50) + env.tasks("eval_extra", 50)}
    assert len(held_out) == 100
    assert not held_out & {t.task_id for t in env.tasks("train", 2000, seed=0)}
    rng = random.Random(1)
    assert all(env.task(rng, d).difficulty == d for d in range(1, MAX_DEPTH + 1))
    with pytest.raises(TaskEnvironmentError, match="eval_extra set has 50"):
        env.tasks("eval_extra", 51)


def test_a_tenth_of_the_programs_of_every_kind_and_depth_is_held_out() -> None:
    for stratum, training in TRAINING_PROGRAMS.items():
        held = HELD_OUT_PROGRAMS[stratum]
        assert held and training and not set(held) & set(training)  # both sides, every depth
        assert len(held) == max(1, round(0.1 * (len(held) + len(training))))
    assert len(HELD_OUT) == sum(map(len, HELD_OUT_PROGRAMS.values())) == 196


def test_no_eval_program_and_no_eval_extra_task_in_any_training_draw(
    full: ProgramSynthesis,
) -> None:
    evals, extras = full.tasks("eval", 1000), full.tasks("eval_extra", 1000)
    eval_programs = {full.cluster(t) for t in evals}
    assert len(eval_programs) > 100 and eval_programs <= HELD_OUT  # many distinct programs
    assert {t.difficulty for t in evals} == {1, 2, 3}
    rng = random.Random(0)
    drawn = [full.task(rng, rng.randint(1, MAX_DEPTH)) for _ in range(20_000)]
    drawn += full.tasks("train", 20_000, seed=1)
    assert not eval_programs & {full.cluster(t) for t in drawn}
    assert not {t.task_id for t in extras} & {t.task_id for t in drawn}
    # eval_extra is in-distribution: its programs are training programs
    training = {program(k, p) for (k, _), ps in TRAINING_PROGRAMS.items() for p in ps}
    assert {full.cluster(t) for t in extras} | {full.cluster(t) for t in drawn} <= training
    assert not any(full.held_out(t) for t in drawn[:2000])
    assert all(full.held_out(t) for t in evals + extras)


def test_held_out_reads_the_spec_not_only_the_id(full: ProgramSynthesis) -> None:
    evaluated, extra = full.tasks("eval", 1)[0], full.tasks("eval_extra", 1)[0]
    renamed = [type(t)("forged", t.environment, t.difficulty, t.spec) for t in (evaluated, extra)]
    assert all(full.held_out(t) for t in renamed)
    spec = Spec.from_json(evaluated.spec)
    assert (
        full.cluster(evaluated)
        == program(spec.kind, spec.ops)
        == f"{spec.kind}:" + ">".join(spec.ops)
    )
    assert full.extra_eval == "seen programs"


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
