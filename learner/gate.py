"""Release decisions: the off-policy gate before a canary, and the canary's online verdict.

:class:`OffPolicyGate` scores candidate and production on the same held-out rows (paired, see
learner.ope) and passes the candidate when the lower confidence bound of the paired DR difference
is above ``-tolerance`` and the candidate's importance weights keep an effective sample size of at
least ``min_effective_sample_size``. Its reward model is cross-fitted on the held-out rows
themselves (two folds by row parity) unless one fitted on training data is given, so q̂ never
scores the rows it was fitted on.

:func:`canary_decision` compares realised reward per request of canary and production traffic
(one-sided normal test of the difference of means; rewards are bounded, so the CLT applies at
the sizes a canary sees): significantly worse → ROLLBACK, not worse at ``confidence`` → PROMOTE,
otherwise CONTINUE until ``max_requests``, where the point estimate decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist
from typing import Protocol, runtime_checkable

import numpy as np

from learner.errors import LearnerError
from learner.ope import DEFAULT_BOOTSTRAP, DEFAULT_CONFIDENCE, PairedComparison, compare
from learner.recipes.gate.objective import RewardModel, fit_reward_model
from learner.recipes.gate.samples import RewardRows
from policies.context import INDEX
from policies.policy import RequestBatch
from schemas.enums import SuggestionTrigger

# Metric names of the candidate's two-sided DR value interval (GateDecision.interval_metrics).
VALUE_LOWER_METRIC = "ope_dr_value_lower"
VALUE_UPPER_METRIC = "ope_dr_value_upper"


@runtime_checkable
class ScoresFeatures(Protocol):
    """A learned policy that scores feature rows directly (policies.gate_net.ServingPolicy)."""

    def probabilities(self, features: np.ndarray) -> np.ndarray: ...


class ScoresRequests(Protocol):
    """Any simulator policy (e.g. HeuristicPolicy, the version-0 production)."""

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray: ...


GatePolicy = ScoresFeatures | ScoresRequests


@dataclass(frozen=True)
class GateConfig:
    """Thresholds of :class:`OffPolicyGate`."""

    tolerance: float = 0.0  # candidate may be at most this much worse (reward per request)
    # ... or, when positive, must be at least this much better: the lower bound of the paired
    # lift must exceed it, so a tie with production (a converged policy) is not promoted.
    min_lift: float = 0.002
    min_effective_sample_size: float = 100.0
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_BOOTSTRAP
    seed: int = 0
    floor: float = 0.05  # exploration floor the serving fleet applies to every policy

    def __post_init__(self) -> None:
        if (
            self.tolerance < 0
            or self.min_lift < 0
            or self.min_effective_sample_size < 0
            or not 0 <= self.floor < 0.5
        ):
            raise LearnerError(
                f"gate tolerance={self.tolerance}, min_lift={self.min_lift}, "
                f"min_effective_sample_size="
                f"{self.min_effective_sample_size} must be >= 0 and floor={self.floor} in "
                "[0, 0.5); fix the gate config."
            )


@dataclass(frozen=True)
class GateDecision:
    """The gate's verdict and the numbers ModelVersionEvent carries (``ope_*``)."""

    passed: bool
    reason: str
    ope_dr_value: float
    ope_dr_lower: float  # production DR + lower bound of the paired DR difference (the verdict)
    ope_snips_value: float
    ope_snips_lower: float
    ope_baseline_value: float  # production's DR value on the same rows
    ope_confidence_level: float
    ope_effective_sample_size: float
    comparison: PairedComparison

    def interval_metrics(self) -> dict[str, float]:
        """The candidate's value interval for the version's ``metrics``: a value realised later
        in the fleet should lie in it. (``ope_dr_lower`` is production's point value plus the
        paired lift's bound: the right test of "better than production", but it ignores the
        sampling error of the level itself.)"""
        low, high = self.comparison.candidate_dr_interval
        return {VALUE_LOWER_METRIC: low, VALUE_UPPER_METRIC: high}

    def event_fields(self) -> dict[str, float | str]:
        """Keyword arguments for ``schemas.events.ModelVersionEvent`` (ope_* and reason)."""
        names = (
            "ope_dr_value",
            "ope_dr_lower",
            "ope_snips_value",
            "ope_snips_lower",
            "ope_baseline_value",
            "ope_confidence_level",
            "ope_effective_sample_size",
            "reason",
        )
        return {name: getattr(self, name) for name in names}


class OffPolicyGate:
    """Decides whether a candidate may go to canary (see the module docstring)."""

    def __init__(self, config: GateConfig | None = None) -> None:
        self.config = config or GateConfig()

    def decide(
        self,
        candidate: GatePolicy,
        production: GatePolicy,
        heldout: RewardRows,
        *,
        reward_model: RewardModel | None = None,
    ) -> GateDecision:
        """Compare ``candidate`` with ``production`` on ``heldout``; LearnerError for no rows."""
        if len(heldout) == 0:
            raise LearnerError("the gate got no held-out rows; build windows with a holdout.")
        c = self.config
        q_show, q_suppress = _reward_predictions(heldout, reward_model)
        result = compare(
            self._probabilities(candidate, heldout),
            self._probabilities(production, heldout),
            heldout.shown,
            heldout.propensity,
            heldout.reward,
            q_show,
            q_suppress,
            confidence=c.confidence,
            resamples=c.resamples,
            seed=c.seed,
            clusters=heldout.user_id,
        )
        passed, reason = self._verdict(result)
        return GateDecision(
            passed=passed,
            reason=reason,
            ope_dr_value=result.candidate_dr,
            ope_dr_lower=result.production_dr + result.dr_difference_lower,
            ope_snips_value=result.candidate_snips,
            ope_snips_lower=result.production_snips + result.snips_difference_lower,
            ope_baseline_value=result.production_dr,
            ope_confidence_level=c.confidence,
            ope_effective_sample_size=result.candidate_ess,
            comparison=result,
        )

    def _verdict(self, r: PairedComparison) -> tuple[bool, str]:
        c = self.config
        figures = (
            f"DR {r.candidate_dr:.4f} vs production {r.production_dr:.4f}, paired difference "
            f"{r.dr_difference:+.4f} (lower {c.confidence:.0%} bound {r.dr_difference_lower:+.4f}),"
            f" ESS {r.candidate_ess:.0f} of {r.rows} rows"
        )
        if r.candidate_ess < c.min_effective_sample_size:
            return (
                False,
                f"effective sample size below {c.min_effective_sample_size:.0f}: {figures}",
            )
        if r.dr_difference_lower <= -c.tolerance:
            return False, f"not shown to be within {c.tolerance} of production: {figures}"
        if c.min_lift > 0 and r.dr_difference_lower <= c.min_lift:
            return False, f"not shown to be {c.min_lift} better than production: {figures}"
        return True, f"passed: {figures}"

    def _probabilities(self, policy: GatePolicy, rows: RewardRows) -> np.ndarray:
        if isinstance(policy, ScoresFeatures):
            p = policy.probabilities(rows.features())
        else:
            p = policy.show_probabilities(_request_batch(rows))
        floor = self.config.floor
        return np.clip(np.asarray(p, dtype=np.float64), floor, 1.0 - floor)


def _request_batch(rows: RewardRows) -> RequestBatch:
    """A RequestBatch of logged rows: contexts and trigger are exact, language and IDE are not
    logged per row here (empty), so policies that read them cannot be gated this way."""
    invoked = rows.context[:, INDEX["invoked"]] == 1.0
    triggers = tuple(
        SuggestionTrigger.INVOKED if i else SuggestionTrigger.AUTOMATIC for i in invoked
    )
    blanks = ("",) * len(rows)
    return RequestBatch(contexts=rows.context, languages=blanks, ides=blanks, triggers=triggers)


def _reward_predictions(
    rows: RewardRows, reward_model: RewardModel | None
) -> tuple[np.ndarray, np.ndarray]:
    features = rows.features()
    if reward_model is not None:
        return reward_model.predict(features)
    q_show, q_suppress = np.zeros(len(rows)), np.zeros(len(rows))
    folds = np.arange(len(rows)) % 2 == 0
    for fold in (folds, ~folds):
        if fold.all() or not fold.any():  # a single row: no second fold to fit on
            model = fit_reward_model(rows)
        else:
            model = fit_reward_model(rows.take(~fold))
        q_show[fold], q_suppress[fold] = model.predict(features[fold])
    return q_show, q_suppress


class CanaryVerdict(StrEnum):
    """What to do with a canary."""

    PROMOTE = "PROMOTE"
    ROLLBACK = "ROLLBACK"
    CONTINUE = "CONTINUE"


@dataclass(frozen=True)
class CanaryDecision:
    """The canary's verdict with realised reward per request of both arms."""

    verdict: CanaryVerdict
    reason: str
    canary_requests: int
    production_requests: int
    canary_reward_per_request: float
    production_reward_per_request: float
    difference_lower: float  # one-sided bounds on canary - production at ``confidence``
    difference_upper: float
    confidence: float


def canary_decision(
    canary_rewards: np.ndarray,
    production_rewards: np.ndarray,
    *,
    min_requests: int,
    confidence: float = DEFAULT_CONFIDENCE,
    tolerance: float = 0.0,
    max_requests: int | None = None,
    canary_clusters: Sequence[str | None] | None = None,
    production_clusters: Sequence[str | None] | None = None,
) -> CanaryDecision:
    """Judge a canary from realised per-request rewards (suppressed requests count as 0).

    CONTINUE while either arm has fewer than ``min_requests``; ROLLBACK when the upper bound of
    canary - production is below ``-tolerance`` (significantly worse); PROMOTE when the lower
    bound is above ``-tolerance``; at ``max_requests`` canary requests the sign of the point
    difference + tolerance decides. ``*_clusters`` (each request's user, or each trial's task
    group) make the standard errors cluster-robust: arms are split by user and one user's
    requests are correlated (as are one task's trials), so treating them as independent would
    overstate the evidence. LearnerError for a confidence outside [0.5, 1).
    """
    if not 0.5 <= confidence < 1.0 or min_requests < 2:
        raise LearnerError(
            f"canary confidence {confidence} must be in [0.5, 1) and min_requests "
            f"{min_requests} >= 2."
        )
    canary = np.asarray(canary_rewards, dtype=np.float64)
    production = np.asarray(production_rewards, dtype=np.float64)
    n_c, n_p = len(canary), len(production)
    mean_c = float(canary.mean()) if n_c else 0.0
    mean_p = float(production.mean()) if n_p else 0.0
    lower, upper = -np.inf, np.inf
    if n_c >= 2 and n_p >= 2:
        se = float(np.sqrt(_mean_variance(canary, canary_clusters)
                           + _mean_variance(production, production_clusters)))  # fmt: skip
        z = NormalDist().inv_cdf(confidence)
        lower, upper = mean_c - mean_p - z * se, mean_c - mean_p + z * se
    verdict, why = _canary_verdict(
        n_c, n_p, mean_c - mean_p, lower, upper, min_requests, tolerance, max_requests
    )
    reason = (
        f"{why}: canary {mean_c:.4f} vs production {mean_p:.4f} reward/request over {n_c} / "
        f"{n_p} requests, difference bounds [{lower:+.4f}, {upper:+.4f}] at {confidence:.0%}"
    )
    return CanaryDecision(
        verdict, reason, n_c, n_p, mean_c, mean_p, float(lower), float(upper), confidence
    )


def _mean_variance(values: np.ndarray, users: Sequence[str | None] | None) -> float:
    """Variance of the mean of ``values``: per request, or clustered by user when given.

    Cluster-robust: sum over users of (their sum of residuals)^2 / n^2, times G / (G - 1) for G
    users; requests without a user count as their own cluster.
    """
    n = len(values)
    if users is None:
        return float(values.var(ddof=1) / n)
    residual = values - values.mean()
    keys = [u if u is not None else f"\0{i}" for i, u in enumerate(users)]
    _, cluster = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    sums = np.bincount(cluster, weights=residual)
    g = len(sums)
    if g < 2:
        return float(values.var(ddof=1) / n)
    return float((sums**2).sum() / n**2 * g / (g - 1))


def _canary_verdict(
    n_c: int,
    n_p: int,
    difference: float,
    lower: float,
    upper: float,
    min_requests: int,
    tolerance: float,
    max_requests: int | None,
) -> tuple[CanaryVerdict, str]:
    if min(n_c, n_p) < min_requests:
        return CanaryVerdict.CONTINUE, f"waiting for {min_requests} requests per arm"
    if upper < -tolerance:
        return CanaryVerdict.ROLLBACK, "canary is significantly worse"
    if lower > -tolerance:
        return CanaryVerdict.PROMOTE, "canary is not worse than production"
    if max_requests is not None and n_c >= max_requests:
        if difference >= -tolerance:
            return CanaryVerdict.PROMOTE, "undecided at max_requests; point estimate not worse"
        return CanaryVerdict.ROLLBACK, "undecided at max_requests; point estimate worse"
    return CanaryVerdict.CONTINUE, "not yet significant either way"
