"""The gate recipe's release check: the off-policy check before a canary (the canary's verdict is
model_registry.canary's).

:class:`OffPolicyCheck` scores candidate and production on the same held-out rows (paired, see
learner.recipes.gate.ope) and passes the candidate when the lower confidence bound of the paired
DR difference is above ``-tolerance`` and the candidate's importance weights keep an effective
sample size of at least ``min_effective_sample_size``. Its reward model is cross-fitted on the
held-out rows themselves (two folds by row parity) unless one fitted on training data is given,
so q̂ never scores the rows it was fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learner.bootstrap import DEFAULT_BOOTSTRAP, DEFAULT_CONFIDENCE
from learner.errors import LearnerError
from learner.recipes.gate.objective import RewardModel, fit_reward_model
from learner.recipes.gate.ope import PairedComparison, compare
from learner.recipes.gate.samples import RewardRows
from policies.context import INDEX
from policies.policy import FeatureScorer, Policy, RequestBatch
from schemas.enums import SuggestionTrigger

# Metric names of the candidate's two-sided DR value interval (OffPolicyDecision.metrics).
VALUE_LOWER_METRIC = "ope_dr_value_lower"
VALUE_UPPER_METRIC = "ope_dr_value_upper"


# What the check compares: a learned network scoring feature rows, or any suggestion policy
# (the version-0 heuristic).
CheckedPolicy = FeatureScorer | Policy


@dataclass(frozen=True)
class OffPolicyCheckConfig:
    """Thresholds of :class:`OffPolicyCheck`."""

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
                f"release_check tolerance={self.tolerance}, min_lift={self.min_lift}, "
                f"min_effective_sample_size="
                f"{self.min_effective_sample_size} must be >= 0 and floor={self.floor} in "
                "[0, 0.5); fix the release_check config."
            )


@dataclass(frozen=True)
class OffPolicyDecision:
    """The off-policy check's verdict and the numbers ModelVersionEvent carries (``ope_*``)."""

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

    def metrics(self) -> dict[str, float]:
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


class OffPolicyCheck:
    """Decides whether a candidate may go to canary (see the module docstring)."""

    def __init__(self, config: OffPolicyCheckConfig | None = None) -> None:
        self.config = config or OffPolicyCheckConfig()

    def decide(
        self,
        candidate: CheckedPolicy,
        production: CheckedPolicy,
        heldout: RewardRows,
        *,
        reward_model: RewardModel | None = None,
    ) -> OffPolicyDecision:
        """Compare ``candidate`` with ``production`` on ``heldout``; LearnerError for no rows."""
        if len(heldout) == 0:
            raise LearnerError(
                "the off-policy check got no held-out rows; build windows with a holdout."
            )
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
        return OffPolicyDecision(
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

    def _probabilities(self, policy: CheckedPolicy, rows: RewardRows) -> np.ndarray:
        if isinstance(policy, FeatureScorer):
            p = policy.probabilities(rows.features())
        else:
            p = policy.show_probabilities(_request_batch(rows))
        floor = self.config.floor
        return np.clip(np.asarray(p, dtype=np.float64), floor, 1.0 - floor)


def _request_batch(rows: RewardRows) -> RequestBatch:
    """A RequestBatch of logged rows: contexts and trigger are exact, language and IDE are not
    logged per row here (empty), so policies that read them cannot be checked this way."""
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
