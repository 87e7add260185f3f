"""Off-policy estimators against cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from learner.bootstrap import mean_lower
from learner.errors import LearnerError
from learner.recipes.gate.ope import (
    compare,
    dr_terms,
    effective_sample_size,
    importance_weights,
    ips,
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


def test_the_candidates_value_interval_covers_its_true_value() -> None:
    """Over many logged samples, the two-sided 95% interval of the candidate's own DR value
    holds the policy's true value in about 95% of them (the demo's realised value is such a
    value, measured on other requests)."""
    grid = (np.arange(100_000) + 0.5) / 100_000  # x ~ U(0, 1): the true value by quadrature

    def policy(x: np.ndarray) -> np.ndarray:
        return 0.05 + 0.9 * x

    true_value = float(np.mean(policy(grid) * ((0.1 + 0.6 * grid) - 0.25)))
    covered, paired_above, widths = 0, 0, []
    for seed in range(60):
        x, _, shown, propensity, reward = _logged(2000, seed)
        zeros = np.zeros(len(x))
        result = compare(policy(x), np.full(len(x), 0.7), shown, propensity, reward, zeros,
                         zeros, resamples=200, seed=seed)  # fmt: skip
        low, high = result.candidate_dr_interval
        assert low <= result.candidate_dr <= high
        covered += low <= true_value <= high
        paired_above += result.production_dr + result.dr_difference_lower > true_value
        widths.append(high - low)
    assert 0.85 <= covered / 60 <= 1.0
    # Production's point value + the paired lift's 95% bound is no bound on the value: it
    # carries none of the level's sampling error (it is the verdict's test, not an interval).
    assert paired_above / 60 > 0.1
    assert float(np.median(widths)) < 0.1  # an interval, not the whole reward range


def test_resampling_users_keeps_the_interval_honest_when_users_differ() -> None:
    """60 users x 40 requests, each user with a hidden preference (28% skeptics): rows of one
    user move together, so the row bootstrap's interval is too narrow; resampling users is not."""

    def accept(preference: np.ndarray, x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(preference + 2 * x - 0.5)))

    def preferences(rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.normal(0, 1.0, n) - 3.0 * (rng.uniform(size=n) < 0.28)

    def policy(x: np.ndarray) -> np.ndarray:
        return 0.05 + 0.9 * x

    rng = np.random.default_rng(123)
    many, xs = preferences(rng, 400_000), rng.uniform(size=400_000)
    true_value = float(np.mean(policy(xs) * (accept(many, xs) - 0.25)))
    covered = {"users": 0, "rows": 0}
    for seed in range(60):
        rng = np.random.default_rng(seed)
        user = np.repeat(np.arange(60), 40)
        x = rng.uniform(size=len(user))
        shown = rng.uniform(size=len(user)) < 0.7
        accepted = rng.uniform(size=len(user)) < accept(preferences(rng, 60)[user], x)
        reward = np.where(shown, np.where(accepted, 0.75, -0.25), 0.0)
        propensity, zeros = np.where(shown, 0.7, 0.3), np.zeros(len(user))
        for by, clusters in (("users", user.astype(str).astype(object)), ("rows", None)):
            result = compare(policy(x), np.full(len(x), 0.7), shown, propensity, reward, zeros,
                             zeros, resamples=200, seed=seed, clusters=clusters)  # fmt: skip
            low, high = result.candidate_dr_interval
            covered[by] += low <= true_value <= high
    assert covered["users"] / 60 >= 0.85
    assert covered["rows"] / 60 < 0.8
