"""Suggestion-gate interfaces: a served gate scores requests, a learned one also feature rows."""

from __future__ import annotations

from policies.gate_net import GatePolicyNet, ServingPolicy
from policies.policy import FALLBACK_VERSION, FeatureScorer, HeuristicPolicy, fallback_policy


def test_a_learned_gate_scores_feature_rows_and_the_heuristic_does_not() -> None:
    assert isinstance(ServingPolicy(GatePolicyNet(), "suggestion-gate", 1), FeatureScorer)
    assert not isinstance(HeuristicPolicy(), FeatureScorer)


def test_the_fallback_is_the_heuristic_v0_of_the_model_it_serves() -> None:
    fallback = fallback_policy("my-gate")
    assert fallback == HeuristicPolicy(name="my-gate", version=FALLBACK_VERSION)
    assert (fallback.version, fallback.show_probability) == (0, 0.95)
