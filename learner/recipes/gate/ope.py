"""Off-policy evaluation of a suggestion gate on logged rows: IPS, SNIPS, DR, ESS, bootstrap.

Notation (all arrays (n,), one entry per logged decision): ``shown`` the logged action,
``propensity`` μ(logged action | x) > 0, ``reward`` r, ``pi_show`` the target policy's
P(show | x) (with its exploration floor already applied), ``q_show`` / ``q_suppress`` a reward
model's q̂(x, ·) (learner.recipes.gate.objective.RewardModel; for tab@1
q̂(show) = 0.75 p̂ - 0.25 (1 - p̂) and q̂(suppress) = 0). Importance weight w = π(a|x) / μ(a|x).

* IPS  = mean(w r): unbiased when μ > 0 wherever π > 0.
* SNIPS = Σ w r / Σ w: biased but invariant to scaling w, lower variance.
* DR   = mean(Σ_b π(b|x) q̂(x,b) + w (r - q̂(x,a))): unbiased with correct μ whatever q̂ is,
  low variance when q̂ is good (for tab@1 the suppress rows add no variance at all: r = q̂ = 0).
* ESS  = (Σ w)² / Σ w²: how many on-policy rows the weighted sample is worth.

Comparisons are paired: candidate and production are scored on the same rows, and the bootstrap
(seeded, learner.bootstrap) gives a one-sided lower bound on the difference. With ``clusters``
(the rows' user ids) it resamples whole users, not rows: one user's requests share a hidden
preference (a skeptic's dozens of rows move together), so rows are not independent and a row
bootstrap is too narrow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learner.bootstrap import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_CONFIDENCE,
    bootstrap_interval,
    bootstrap_lower,
    cluster_sums,
)
from learner.errors import LearnerError


def importance_weights(
    pi_show: np.ndarray, shown: np.ndarray, propensity: np.ndarray
) -> np.ndarray:
    """w = π(logged action | x) / μ(logged action | x); LearnerError for propensities ≤ 0."""
    _check_lengths(pi_show, shown, propensity)
    if np.any(~(propensity > 0)):
        raise LearnerError(
            "propensities must be > 0 (the exploration floor guarantees it); rows without one "
            "cannot be used for off-policy evaluation."
        )
    pi_logged = np.where(shown, pi_show, 1.0 - pi_show)
    return np.asarray(pi_logged / propensity, dtype=np.float64)


def ips(weights: np.ndarray, reward: np.ndarray) -> float:
    """Inverse propensity scoring: mean(w r)."""
    return float(np.mean(weights * reward))


def snips(weights: np.ndarray, reward: np.ndarray) -> float:
    """Self-normalised IPS: Σ w r / Σ w (0 when Σ w = 0)."""
    total = float(np.sum(weights))
    return float(np.sum(weights * reward)) / total if total > 0 else 0.0


def dr_terms(
    pi_show: np.ndarray,
    shown: np.ndarray,
    propensity: np.ndarray,
    reward: np.ndarray,
    q_show: np.ndarray,
    q_suppress: np.ndarray,
) -> np.ndarray:
    """Per-row doubly-robust values (n,); their mean is the DR estimate."""
    w = importance_weights(pi_show, shown, propensity)
    direct = pi_show * q_show + (1.0 - pi_show) * q_suppress
    return np.asarray(direct + w * (reward - np.where(shown, q_show, q_suppress)))


def effective_sample_size(weights: np.ndarray) -> float:
    """(Σ w)² / Σ w² (0 for all-zero weights)."""
    squares = float(np.sum(weights**2))
    return float(np.sum(weights)) ** 2 / squares if squares > 0 else 0.0


@dataclass(frozen=True)
class PairedComparison:
    """Candidate vs production on the same logged rows (values are mean reward per request)."""

    rows: int
    confidence: float
    candidate_dr: float
    production_dr: float
    dr_difference_lower: float  # lower bound on candidate_dr - production_dr
    # Two-sided interval of the candidate's own value (its DR terms alone): unlike
    # production_dr + dr_difference_lower it carries the level's sampling error, so it is what
    # a value realised later on other requests should fall in.
    candidate_dr_interval: tuple[float, float]
    candidate_snips: float
    production_snips: float
    snips_difference_lower: float
    candidate_ips: float
    production_ips: float
    candidate_ess: float
    production_ess: float

    @property
    def dr_difference(self) -> float:
        return self.candidate_dr - self.production_dr

    @property
    def snips_difference(self) -> float:
        return self.candidate_snips - self.production_snips


def compare(
    pi_candidate: np.ndarray,
    pi_production: np.ndarray,
    shown: np.ndarray,
    propensity: np.ndarray,
    reward: np.ndarray,
    q_show: np.ndarray,
    q_suppress: np.ndarray,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    clusters: np.ndarray | None = None,
) -> PairedComparison:
    """Paired DR / SNIPS / IPS comparison with bootstrap lower bounds on the differences and
    an interval of the candidate's value; ``clusters`` (n,) resamples by user (module doc)."""
    _check_lengths(pi_candidate, pi_production, shown, propensity, reward, q_show, q_suppress)
    if len(reward) == 0:
        raise LearnerError("no held-out rows to evaluate on; wait for more data.")
    w_c = importance_weights(pi_candidate, shown, propensity)
    w_p = importance_weights(pi_production, shown, propensity)
    dr_c = dr_terms(pi_candidate, shown, propensity, reward, q_show, q_suppress)
    dr_p = dr_terms(pi_production, shown, propensity, reward, q_show, q_suppress)
    # Per cluster: rows, Σ dr_c, Σ (dr_c - dr_p), Σ w_c r, Σ w_c, Σ w_p r, Σ w_p.
    sums = cluster_sums(clusters, dr_c, dr_c - dr_p, w_c * reward, w_c, w_p * reward, w_p)
    k = len(sums)

    def resampled(idx: np.ndarray) -> np.ndarray:  # (b, k) cluster indices → (b, 7) sums
        return np.asarray(sums[idx].sum(axis=1))

    def dr_difference(idx: np.ndarray) -> np.ndarray:
        total = resampled(idx)
        return np.asarray(total[:, 2] / total[:, 0])

    def snips_difference(idx: np.ndarray) -> np.ndarray:
        total = resampled(idx)
        with np.errstate(invalid="ignore", divide="ignore"):
            diff = total[:, 3] / total[:, 4] - total[:, 5] / total[:, 6]
        return np.asarray(np.nan_to_num(diff), dtype=np.float64)

    def candidate_value(idx: np.ndarray) -> np.ndarray:
        total = resampled(idx)
        return np.asarray(total[:, 1] / total[:, 0])

    dr_lower = bootstrap_lower(dr_difference, k, confidence=confidence, resamples=resamples,
                               seed=seed)  # fmt: skip
    snips_lower = bootstrap_lower(snips_difference, k, confidence=confidence,
                                  resamples=resamples, seed=seed)  # fmt: skip
    interval = bootstrap_interval(candidate_value, k, confidence=confidence,
                                  resamples=resamples, seed=seed)  # fmt: skip
    return PairedComparison(
        rows=len(reward),
        confidence=confidence,
        candidate_dr=float(dr_c.mean()),
        production_dr=float(dr_p.mean()),
        dr_difference_lower=dr_lower,
        candidate_dr_interval=interval,
        candidate_snips=snips(w_c, reward),
        production_snips=snips(w_p, reward),
        snips_difference_lower=snips_lower,
        candidate_ips=ips(w_c, reward),
        production_ips=ips(w_p, reward),
        candidate_ess=effective_sample_size(w_c),
        production_ess=effective_sample_size(w_p),
    )


def _check_lengths(*arrays: np.ndarray) -> None:
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        raise LearnerError(f"off-policy inputs must have one length, got {sorted(lengths)}.")
