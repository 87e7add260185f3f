"""Behaviour policies that decide SHOWN / SUPPRESSED, and the exploration-floored decision.

A policy scores a batch of requests (one call per batch keeps a learned model's per-request cost
low: the simulator decides tens of thousands of requests a second). :func:`decide` turns the
scores into decisions: it clips every show probability into ``[floor, 1 - floor]`` so both
decisions stay possible, draws the decision, and returns the propensity, the probability of the
decision actually taken, which off-policy estimators divide by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from policies.policy import HeuristicPolicy, Policy
from simulator.config import PolicyConfig
from simulator.errors import SimulatorError

# Policy kind (config key policy.name) → factory from the policy section of the config.
POLICIES: Mapping[str, Callable[[PolicyConfig], Policy]] = MappingProxyType(
    {
        "heuristic": lambda config: HeuristicPolicy(
            name=config.model_name, show_probability=config.show_probability
        )
    }
)


def build_policy(config: PolicyConfig) -> Policy:
    """The policy ``config.name`` names, built from ``config``; SimulatorError if unknown."""
    factory = POLICIES.get(config.name)
    if factory is None:
        raise SimulatorError(
            f"unknown policy {config.name!r} (policy.name); known policies: "
            f"{', '.join(sorted(POLICIES))}."
        )
    return factory(config)


def decide(
    show_probability: np.ndarray, uniforms: np.ndarray, floor: float
) -> tuple[np.ndarray, np.ndarray]:
    """Draw SHOWN/SUPPRESSED for each request; return ``(shown, propensity)``.

    ``show_probability`` and ``uniforms`` (draws in [0, 1)) are (n,) arrays. Each probability is
    clipped into ``[floor, 1 - floor]``; a request is shown when its uniform is below the clipped
    probability. ``propensity`` is the clipped P(show) where shown and 1 - it where suppressed,
    so it always lies in ``[floor, 1 - floor]``. Raises :class:`SimulatorError` for a floor
    outside (0, 0.5) or probabilities that are not finite numbers in [0, 1] (a policy bug).
    """
    if not 0.0 < floor < 0.5:
        raise SimulatorError(
            f"exploration floor {floor} must be in (0, 0.5); fix policy.exploration_floor."
        )
    p = np.asarray(show_probability, dtype=np.float64)
    if p.shape != uniforms.shape:
        raise SimulatorError(
            f"the policy returned {p.shape} probabilities for {uniforms.shape} requests; "
            "show_probabilities must return one per request."
        )
    if not np.all((p >= 0.0) & (p <= 1.0)):  # also false for NaN
        raise SimulatorError(
            "the policy returned show probabilities outside [0, 1] or NaN; "
            "fix its show_probabilities."
        )
    clipped = np.clip(p, floor, 1.0 - floor)
    shown = uniforms < clipped
    # 1 - (1 - floor) can land one ulp below floor; the final clip keeps the bound exact.
    propensity = np.clip(np.where(shown, clipped, 1.0 - clipped), floor, 1.0 - floor)
    return shown, propensity
