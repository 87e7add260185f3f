"""Suggestion-gate interfaces: a served gate scores requests, a learned one also feature rows."""

from __future__ import annotations

from policies.gate_net import GatePolicyNet, ServingPolicy
from policies.policy import FeatureScorer, HeuristicPolicy


def test_a_learned_gate_scores_feature_rows_and_the_heuristic_does_not() -> None:
    assert isinstance(ServingPolicy(GatePolicyNet(), "suggestion-gate", 1), FeatureScorer)
    assert not isinstance(HeuristicPolicy(), FeatureScorer)
