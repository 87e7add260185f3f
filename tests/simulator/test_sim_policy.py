"""simulator.policy: the exploration-floored decision, the heuristic, the registry."""

from __future__ import annotations

import numpy as np
import pytest

from policies.context import CONTEXT_DIM
from policies.errors import PolicyError
from schemas.enums import SuggestionTrigger
from simulator import POLICIES, HeuristicPolicy, RequestBatch, SimulatorError, build_policy, decide
from simulator.config import PolicyConfig


def _batch(n: int) -> RequestBatch:
    return RequestBatch(
        contexts=np.zeros((n, CONTEXT_DIM), dtype=np.float32),
        languages=("python",) * n,
        ides=("vscode",) * n,
        triggers=(SuggestionTrigger.AUTOMATIC,) * n,
    )


@pytest.mark.parametrize("floor", [0.01, 0.05, 0.2])
def test_propensity_is_within_floor_and_is_the_logged_decisions_probability(floor: float) -> None:
    rng = np.random.default_rng(0)
    p = np.concatenate([[0.0, 1.0, floor / 2, 1 - floor / 2], rng.random(2000)])
    shown, propensity = decide(p, rng.random(len(p)), floor)
    assert np.all((propensity >= floor) & (propensity <= 1 - floor))
    clipped = np.clip(p, floor, 1 - floor)
    np.testing.assert_allclose(propensity[shown], clipped[shown], rtol=0, atol=1e-15)
    np.testing.assert_allclose(propensity[~shown], 1 - clipped[~shown], rtol=0, atol=1e-15)


def test_decision_frequencies_match_the_clipped_probability() -> None:
    rng = np.random.default_rng(1)
    n = 40_000
    shown, _ = decide(np.zeros(n), rng.random(n), 0.05)
    assert shown.mean() == pytest.approx(0.05, abs=0.005)  # never 0: exploration
    shown, _ = decide(np.ones(n), rng.random(n), 0.05)
    assert shown.mean() == pytest.approx(0.95, abs=0.005)  # never 1


@pytest.mark.parametrize("floor", [0.0, 0.5, -0.1, 0.7])
def test_floor_out_of_range(floor: float) -> None:
    with pytest.raises(SimulatorError, match="exploration floor"):
        decide(np.array([0.5]), np.array([0.1]), floor)


@pytest.mark.parametrize("bad", [[1.5], [-0.1], [float("nan")]])
def test_invalid_policy_probabilities(bad: list[float]) -> None:
    with pytest.raises(SimulatorError, match="outside"):
        decide(np.array(bad), np.array([0.1]), 0.05)


def test_wrong_number_of_probabilities() -> None:
    with pytest.raises(SimulatorError, match="one per request"):
        decide(np.array([0.5, 0.5]), np.array([0.1]), 0.05)


def test_heuristic_is_flat_version_zero() -> None:
    policy = HeuristicPolicy()
    assert (policy.name, policy.version) == ("suggestion-gate", 0)
    np.testing.assert_array_equal(policy.show_probabilities(_batch(3)), [0.95] * 3)
    with pytest.raises(PolicyError, match="show_probability"):
        HeuristicPolicy(show_probability=1.2)


def test_registry_builds_from_config() -> None:
    assert "heuristic" in POLICIES
    policy = build_policy(PolicyConfig(model_name="gate", show_probability=0.8))
    assert policy == HeuristicPolicy(name="gate", show_probability=0.8)
    with pytest.raises(SimulatorError, match=r"unknown policy 'learned'.*heuristic"):
        build_policy(PolicyConfig(name="learned"))
