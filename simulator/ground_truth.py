"""Ground truth of a simulated run: what the hidden model knew and what really happened.

Tests and the demo compare the platform's estimates against it. Totals per model version are
always exact; per-request rows are kept for the first ``keep_requests`` requests only, so a long
load-generation run does not grow without bound.

Rewards are ``tab@1`` (DESIGN §5): +0.75 accepted (PARTIAL counts as accepted), -0.25 rejected or
ignored, 0 suppressed. Showing pays exactly when P(accept) > 0.25, so the *oracle* (show iff
P(accept) > 0.25) earns ``max(0, P(accept) - 0.25)`` per request in expectation.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np

ACCEPT_REWARD = 0.75
REJECT_REWARD = -0.25
BREAK_EVEN = -REJECT_REWARD / (ACCEPT_REWARD - REJECT_REWARD)  # 0.25: P(accept) where showing pays


class OutcomeCode(IntEnum):
    """What became of one request (IGNORED: rejected without an outcome event)."""

    SUPPRESSED = 0
    ACCEPTED = 1
    PARTIAL = 2
    REJECTED = 3
    IGNORED = 4


# Indexed by OutcomeCode.
_REWARD = np.array([0.0, ACCEPT_REWARD, ACCEPT_REWARD, REJECT_REWARD, REJECT_REWARD])


@dataclass(frozen=True)
class GroundTruthSummary:
    """Totals over a set of requests, and the per-request rates the demo reports."""

    requests: int = 0
    shown: int = 0
    accepted: int = 0  # ACCEPTED or PARTIAL
    reward_sum: float = 0.0  # realised tab@1
    expected_reward_sum: float = 0.0  # Σ shown * (P(accept) - 0.25): tab@1 without outcome noise
    oracle_reward_sum: float = 0.0  # Σ max(0, P(accept) - 0.25)
    p_accept_sum: float = 0.0  # Σ P(accept) over all requests
    secrets_planted: int = 0

    def __add__(self, other: GroundTruthSummary) -> GroundTruthSummary:
        return GroundTruthSummary(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )

    @property
    def shown_per_1000(self) -> float:
        return 1000.0 * self.shown / self.requests if self.requests else 0.0

    @property
    def accept_rate(self) -> float:
        """Accepted / shown (0 when nothing was shown)."""
        return self.accepted / self.shown if self.shown else 0.0

    @property
    def reward_per_request(self) -> float:
        return self.reward_sum / self.requests if self.requests else 0.0

    @property
    def expected_reward_per_request(self) -> float:
        return self.expected_reward_sum / self.requests if self.requests else 0.0

    @property
    def oracle_reward_per_request(self) -> float:
        return self.oracle_reward_sum / self.requests if self.requests else 0.0

    @property
    def mean_p_accept(self) -> float:
        return self.p_accept_sum / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class GroundTruthTable:
    """Per-request rows in request order (all arrays have one entry per request)."""

    suggestion_ids: tuple[str, ...]
    model_version: np.ndarray  # int64
    p_accept: np.ndarray  # float64 hidden P(accept)
    shown: np.ndarray  # bool
    propensity: np.ndarray  # float64, of the logged decision
    outcome: np.ndarray  # int8 OutcomeCode
    reward: np.ndarray  # float64 realised tab@1


def _summarise(
    p_accept: np.ndarray, outcome: np.ndarray, secrets_planted: int
) -> GroundTruthSummary:
    """Totals of one set of requests (arrays of equal length)."""
    shown = outcome != OutcomeCode.SUPPRESSED
    margin = p_accept - BREAK_EVEN
    return GroundTruthSummary(
        requests=len(outcome),
        shown=int(shown.sum()),
        accepted=int(np.isin(outcome, (OutcomeCode.ACCEPTED, OutcomeCode.PARTIAL)).sum()),
        reward_sum=float(_REWARD[outcome].sum()),
        expected_reward_sum=float(margin[shown].sum()),
        oracle_reward_sum=float(np.maximum(margin, 0.0).sum()),
        p_accept_sum=float(p_accept.sum()),
        secrets_planted=secrets_planted,
    )


class GroundTruthLog:
    """Accumulates ground truth batch by batch (see the module docstring)."""

    def __init__(self, keep_requests: int = 100_000) -> None:
        self.keep_requests = keep_requests
        self._by_version: dict[int, GroundTruthSummary] = {}
        self._ids: list[str] = []
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._kept = 0

    def record(
        self,
        suggestion_ids: list[str],
        versions: np.ndarray,
        p_accept: np.ndarray,
        propensity: np.ndarray,
        outcome: np.ndarray,
        secrets_planted: int,
    ) -> None:
        """Add one batch of requests; ``versions`` is the model version serving each request.

        All arrays have length n (``versions`` int64).
        """
        order = list(dict.fromkeys(int(v) for v in versions))  # versions in order first served
        for version in order:
            mine = versions == version
            # A batch's planted-secret count is not per request: book it on its first version.
            secrets = secrets_planted if version == order[0] else 0
            part = _summarise(p_accept[mine], outcome[mine], secrets)
            self._by_version[version] = self._by_version.get(version, GroundTruthSummary()) + part
        shown = outcome != OutcomeCode.SUPPRESSED
        reward = _REWARD[outcome]
        room = self.keep_requests - self._kept
        if room > 0:
            take = slice(0, min(room, len(outcome)))
            columns = (versions, p_accept, shown, propensity, outcome.astype(np.int8), reward)
            self._chunks.append(tuple(column[take] for column in columns))
            self._ids.extend(suggestion_ids[take])
            self._kept += len(outcome[take])

    def summary(self) -> GroundTruthSummary:
        """Totals over every request so far, all model versions together."""
        total = GroundTruthSummary()
        for part in self._by_version.values():
            total = total + part
        return total

    def by_version(self) -> dict[int, GroundTruthSummary]:
        """Totals per model version, in the order versions first served."""
        return dict(self._by_version)

    def table(self) -> GroundTruthTable:
        """The kept per-request rows (the first ``keep_requests`` requests)."""
        if not self._chunks:
            empty = np.empty(0)
            return GroundTruthTable(
                (),
                empty.astype(np.int64),
                empty,
                empty.astype(bool),
                empty,
                empty.astype(np.int8),
                empty,
            )
        columns = [np.concatenate(parts) for parts in zip(*self._chunks, strict=True)]
        return GroundTruthTable(tuple(self._ids), *columns)
