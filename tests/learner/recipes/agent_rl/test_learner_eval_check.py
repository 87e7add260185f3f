"""The agent eval check's decisions on paired eval results."""

from __future__ import annotations

import numpy as np
import pytest

from learner.errors import LearnerError
from learner.eval_suite import EvalResult
from learner.recipes.agent_rl.eval_check import EvalCheckConfig, eval_check

N = 200


def _result(passed: np.ndarray) -> EvalResult:
    ids = tuple(f"t{i}" for i in range(len(passed)))
    return EvalResult(ids, passed.astype(bool), passed.astype(np.float64), ("ok",) * len(passed))


def _pair(base_rate: float, lift: float, seed: int = 0) -> tuple[EvalResult, EvalResult]:
    rng = np.random.default_rng(seed)
    production = rng.random(N) < base_rate
    candidate = production | (rng.random(N) < lift)  # solves what production did, and more
    return _result(candidate), _result(production)


def test_a_real_improvement_passes_with_every_number_in_the_metrics() -> None:
    candidate, production = _pair(0.15, 0.25)
    decision = eval_check(candidate, production, EvalCheckConfig())
    assert decision.passed, decision.reason
    assert decision.pass_lift_lower > 0 and decision.candidate_pass_at_1 > 0.3
    assert decision.metrics()["eval_production_pass_at_1"] == pytest.approx(0.15, abs=0.05)


def test_a_tie_and_a_regression_are_refused() -> None:
    same = _result(np.random.default_rng(1).random(N) < 0.2)
    tie = eval_check(same, same, EvalCheckConfig())
    assert not tie.passed and "no significant pass@1 improvement" in tie.reason
    production, candidate = _pair(0.15, 0.25)  # swapped: the candidate lost tasks
    worse = eval_check(candidate, production, EvalCheckConfig())
    assert not worse.passed and "regress" in worse.reason


def test_results_on_different_tasks_are_refused() -> None:
    a = _result(np.ones(3))
    b = EvalResult(("x", "y", "z"), a.passed, a.rewards, a.statuses)
    with pytest.raises(LearnerError, match="same"):
        eval_check(a, b, EvalCheckConfig())


def test_the_bounds_resample_clusters_and_report_their_number() -> None:
    candidate, production = _pair(0.15, 0.25)
    # the same 200 verdicts, each task repeated 5 times in its own cluster (5 inputs of a program)
    ids = tuple(f"t{i}" for i in range(5 * N))
    programs = tuple(f"p{i // 5}" for i in range(5 * N))

    def repeated(result: EvalResult, clusters: tuple[str, ...]) -> EvalResult:
        passed = np.repeat(result.passed, 5)
        return EvalResult(
            ids, passed, passed.astype(np.float64), ("ok",) * len(ids), clusters=clusters
        )

    unclustered = eval_check(repeated(candidate, ()), repeated(production, ()), EvalCheckConfig())
    clustered = eval_check(
        repeated(candidate, programs), repeated(production, programs), EvalCheckConfig()
    )
    assert unclustered.clusters == 5 * N and clustered.clusters == N
    assert clustered.metrics()["eval_clusters"] == N and f"{N} clusters" in clustered.reason
    assert clustered.pass_lift == pytest.approx(unclustered.pass_lift)
    assert clustered.pass_lift_lower < unclustered.pass_lift_lower - 0.02  # wider: 200 units
    other = tuple(f"q{i}" for i in range(5 * N))
    with pytest.raises(LearnerError, match="clusters"):
        eval_check(repeated(candidate, programs), repeated(production, other), EvalCheckConfig())
