"""Off-policy estimators against cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from learner.errors import LearnerError
from learner.ope import (
    compare,
    dr_terms,
    effective_sample_size,
    importance_weights,
    ips,
    mean_lower,
    snips,
)


def _logged(
    n: int, seed: int, mu_show: np.ndarray | float = 0.7
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Logged bandit data with P(accept | x) = p(x), tab@1 rewards and known propensities."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=n)
    p_accept = 0.1 + 0.6 * x
    mu = np.broadcast_to(np.asarray(mu_show, dtype=float), (n,))
    shown = rng.uniform(size=n) < mu
    accepted = rng.uniform(size=n) < p_accept
    reward = np.where(shown, np.where(accepted, 0.75, -0.25), 0.0)
    propensity = np.where(shown, mu, 1 - mu)
    return x, p_accept, shown, propensity, reward


def test_ips_of_the_logging_policy_is_the_on_policy_mean() -> None:
    _, _, shown, propensity, reward = _logged(2000, 0)
    w = importance_weights(np.full(2000, 0.7), shown, propensity)
    np.testing.assert_allclose(w, 1.0)
    assert ips(w, reward) == pytest.approx(reward.mean())
    assert snips(w, reward) == pytest.approx(reward.mean())
    assert effective_sample_size(w) == pytest.approx(2000)


def test_hand_computed_example() -> None:
    shown = np.array([True, True, False, False])
    propensity = np.array([0.5, 0.8, 0.5, 0.2])
    reward = np.array([0.75, -0.25, 0.0, 0.0])
    pi = np.array([1.0, 0.4, 0.5, 0.0])  # P(show) of the target
    w = importance_weights(pi, shown, propensity)
    np.testing.assert_allclose(w, [2.0, 0.5, 1.0, 5.0])
    assert ips(w, reward) == pytest.approx((1.5 - 0.125) / 4)
    assert snips(w, reward) == pytest.approx((1.5 - 0.125) / 8.5)
    assert effective_sample_size(w) == pytest.approx(8.5**2 / 30.25)
    q_show, q_sup = np.full(4, 0.1), np.zeros(4)
    terms = dr_terms(pi, shown, propensity, reward, q_show, q_sup)
    np.testing.assert_allclose(terms, [0.1 + 2 * 0.65, 0.04 + 0.5 * -0.35, 0.05, 0.0])


def test_snips_is_invariant_to_scaling_the_weights() -> None:
    _, _, shown, propensity, reward = _logged(500, 1)
    w = importance_weights(np.full(500, 0.3), shown, propensity)
    assert snips(3.7 * w, reward) == pytest.approx(snips(w, reward))


def test_dr_is_unbiased_with_a_wrong_reward_model() -> None:
    # Target: show iff x > 0.25 (floored); its true value, in expectation over x ~ U(0, 1).
    grid = np.linspace(0, 1, 200_001)
    pi_grid = np.where(grid > 0.25, 0.95, 0.05)
    truth = float(np.mean(pi_grid * (0.1 + 0.6 * grid - 0.25)))
    estimates = []
    for seed in range(200):
        x, _, shown, propensity, reward = _logged(1000, seed, mu_show=0.2 + 0.6 * (seed % 2))
        pi = np.where(x > 0.25, 0.95, 0.05)
        wrong_q = np.full(1000, 0.3)  # badly biased q̂(show)
        estimates.append(dr_terms(pi, shown, propensity, reward, wrong_q, np.zeros(1000)).mean())
    mean, se = np.mean(estimates), np.std(estimates) / np.sqrt(len(estimates))
    assert abs(mean - truth) < 3 * se + 1e-4


def test_paired_comparison_finds_the_better_policy_with_a_seeded_bound() -> None:
    x, p_accept, shown, propensity, reward = _logged(4000, 7)
    good = np.where(x > 0.25, 0.95, 0.05)
    bad = np.where(x > 0.25, 0.05, 0.95)
    q_show, q_sup = p_accept - 0.25, np.zeros(4000)
    result = compare(good, bad, shown, propensity, reward, q_show, q_sup, resamples=300, seed=3)
    assert result.dr_difference > 0 and result.dr_difference_lower > 0
    assert result.snips_difference_lower > 0
    again = compare(good, bad, shown, propensity, reward, q_show, q_sup, resamples=300, seed=3)
    assert again == result
    assert result.candidate_ess < result.rows


def test_bootstrap_lower_bound_is_below_the_mean_and_validates() -> None:
    terms = np.random.default_rng(0).normal(1.0, 1.0, size=400)
    lower = mean_lower(terms, confidence=0.95, resamples=500, seed=1)
    assert terms.mean() - 2.5 * terms.std() / 20 < lower < terms.mean()
    with pytest.raises(LearnerError):
        mean_lower(terms, confidence=1.5)
    with pytest.raises(LearnerError, match="propensities"):
        importance_weights(np.ones(2), np.array([True, False]), np.array([0.5, 0.0]))
