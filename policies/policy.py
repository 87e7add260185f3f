"""What a suggestion-gate policy is: the requests it sees (:class:`RequestBatch`), the
:class:`Policy` Protocol every served gate implements (the heuristic version 0, the learned
network of ``policies.gate_net``), :class:`FeatureScorer` (a learned gate scoring feature rows
directly, as the learner's off-policy check reads it), and :class:`HeuristicPolicy`, version 0,
built by :func:`fallback_policy` wherever a gate model has no version yet (serving replicas, the
learner's production baseline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from policies.errors import PolicyError
from schemas.enums import SuggestionTrigger

# Every gate model's version 0: the heuristic policy, served until production points at a
# registered version; never registered itself (the registry's versions start at 1).
FALLBACK_VERSION = 0
DEFAULT_SHOW_PROBABILITY = 0.95  # the heuristic's flat P(show)


@dataclass(frozen=True)
class RequestBatch:
    """What a policy may see about ``n`` requests: the context vectors and categorical context."""

    contexts: np.ndarray  # (n, CONTEXT_DIM) float32, policies.context's sim-context@1 layout
    languages: tuple[str, ...]
    ides: tuple[str, ...]
    triggers: tuple[SuggestionTrigger, ...]
    # Raw (not yet pseudonymised) user id per request, for policies that look up per-user
    # features; empty when the caller does not provide them.
    user_ids: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.languages)


class Policy(Protocol):
    """A suggestion gate: the model name and version it logs, and P(show) per request."""

    @property
    def name(self) -> str:
        """Logged as ``SuggestionOffered.model_name``."""
        ...

    @property
    def version(self) -> int:
        """Logged as ``SuggestionOffered.model_version``."""
        ...

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray:
        """P(SHOWN) for each request of ``batch``: shape (len(batch),), values in [0, 1]."""
        ...


@runtime_checkable
class FeatureScorer(Protocol):
    """A learned gate that scores feature rows directly (``policies.gate_net.ServingPolicy``, a
    fixed set of scores in the learner), so that an off-policy check scores the rows the logged
    requests became rather than rebuilding them as a :class:`RequestBatch`."""

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(SHOWN) per feature row: ``features`` (n, d) float32 → shape (n,), values in [0, 1]."""
        ...


@dataclass(frozen=True)
class HeuristicPolicy:
    """Version 0: shows (almost) everything with a flat probability, whatever the context."""

    name: str = "suggestion-gate"
    version: int = FALLBACK_VERSION
    show_probability: float = DEFAULT_SHOW_PROBABILITY

    def __post_init__(self) -> None:
        if not 0.0 <= self.show_probability <= 1.0:
            raise PolicyError(
                f"HeuristicPolicy.show_probability={self.show_probability} must be in [0, 1]; "
                "set policy.show_probability accordingly."
            )

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray:
        return np.full(len(batch), self.show_probability, dtype=np.float64)


def fallback_policy(
    model_name: str, show_probability: float = DEFAULT_SHOW_PROBABILITY
) -> HeuristicPolicy:
    """Version 0 (:data:`FALLBACK_VERSION`) of the gate model ``model_name``: the heuristic that
    shows with a flat ``show_probability``. PolicyError when that is outside [0, 1]."""
    return HeuristicPolicy(
        name=model_name, version=FALLBACK_VERSION, show_probability=show_probability
    )
