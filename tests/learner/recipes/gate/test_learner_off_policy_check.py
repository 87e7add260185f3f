"""The off-policy check (the canary's decision is tested in tests/model_registry)."""

from __future__ import annotations

import numpy as np
import pytest

from learner.errors import LearnerError
from learner.recipes.gate.off_policy_check import OffPolicyCheck, OffPolicyCheckConfig
from learner.recipes.gate.samples import RewardRows
from policies.policy import HeuristicPolicy
from schemas.events import ModelVersionEvent


class _Threshold:
    """Shows (0.95) where context[0] > cut, else 0.05; ``invert`` does the opposite."""

    def __init__(self, cut: float, invert: bool = False) -> None:
        self.cut, self.invert = cut, invert

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        show = (features[:, 0] > self.cut) != self.invert
        return np.where(show, 0.95, 0.05)


def _heldout(n: int, seed: int = 0) -> RewardRows:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 10)).astype(np.float32)
    x[:, 7] = rng.uniform(size=n) < 0.1
    p_accept = 1 / (1 + np.exp(-(-1.2 + 1.5 * x[:, 0])))
    shown = rng.uniform(size=n) < 0.95
    accepted = rng.uniform(size=n) < p_accept
    return RewardRows(
        source_id=np.arange(n).astype(str).astype(object),
        context=x,
        shown=shown,
        propensity=np.where(shown, 0.95, 0.05),
        reward=np.where(shown, np.where(accepted, 0.75, -0.25), 0.0),
        model_version=np.zeros(n, dtype=np.int64),
        event_time_ms=np.zeros(n, dtype=np.int64),
    )


_CUT = float(np.log(1 / 3) + 1.2) / 1.5  # P(accept) = 0.25 there: the break-even point


def test_a_better_candidate_passes_with_event_ready_numbers() -> None:
    check = OffPolicyCheck(OffPolicyCheckConfig(resamples=300, min_effective_sample_size=100))
    decision = check.decide(_Threshold(_CUT), HeuristicPolicy(), _heldout(5000))
    assert decision.passed, decision.reason
    assert decision.ope_dr_value > decision.ope_baseline_value
    assert decision.ope_dr_lower > decision.ope_baseline_value
    assert decision.ope_confidence_level == 0.95
    assert 100 < decision.ope_effective_sample_size < 5000
    fields = decision.event_fields()
    assert set(fields) <= set(ModelVersionEvent.__dataclass_fields__)


def test_a_planted_worse_candidate_is_rejected() -> None:
    check = OffPolicyCheck(OffPolicyCheckConfig(resamples=300, min_effective_sample_size=50))
    decision = check.decide(_Threshold(_CUT, invert=True), HeuristicPolicy(), _heldout(5000, 1))
    assert not decision.passed and "not shown to be within" in decision.reason
    assert decision.ope_dr_value < decision.ope_baseline_value


def test_too_few_effective_samples_fail_the_check() -> None:
    check = OffPolicyCheck(OffPolicyCheckConfig(resamples=100, min_effective_sample_size=1000))
    decision = check.decide(_Threshold(_CUT), HeuristicPolicy(), _heldout(2000, 2))
    assert not decision.passed and "effective sample size" in decision.reason
    with pytest.raises(LearnerError):
        check.decide(_Threshold(0.0), HeuristicPolicy(), _heldout(0))


def test_a_tie_with_production_is_not_a_new_version() -> None:
    """The candidate *is* production: within tolerance, but not the minimum lift better."""
    rows = _heldout(5000, 3)
    check = OffPolicyCheck(
        OffPolicyCheckConfig(resamples=300, min_effective_sample_size=50, tolerance=0.01)
    )
    decision = check.decide(HeuristicPolicy(), HeuristicPolicy(), rows)
    assert not decision.passed and "better than production" in decision.reason
    no_lift = OffPolicyCheck(OffPolicyCheckConfig(resamples=300, min_effective_sample_size=50,
                                       tolerance=0.01, min_lift=0.0))  # fmt: skip
    assert no_lift.decide(HeuristicPolicy(), HeuristicPolicy(), rows).passed
