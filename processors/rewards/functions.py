"""Reward functions: named, versioned plug-ins that score one attributed suggestion (DESIGN §5).

Every function pays 0 for a SUPPRESSED suggestion (nothing was shown, so nothing to reward) and
treats a shown suggestion with no outcome by the attribution deadline as rejected (ignored).
The base, ``tab@1`` (Cursor Tab's), pays +0.75 for an acceptance and -0.25 otherwise, so showing
pays exactly when P(accept) > 0.25; the others refine it with code survival and test results.

Add a function by writing a class with an ``id`` ("name@version") and ``score``, and listing an
instance in :data:`REWARD_FUNCTIONS`. Never change what a published id computes: bump the version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from processors.rewards.errors import RewardError
from schemas.enums import Decision, Outcome
from schemas.events import EditObserved, SuggestionOffered, SuggestionOutcome, TestRunCompleted

ACCEPT_REWARD = 0.75
REJECT_REWARD = -0.25
TESTS_WEIGHT = 0.25


@dataclass(frozen=True)
class Attribution:
    """What is known about one suggestion at its attribution deadline.

    ``outcome`` is None when the user never decided (ignored); ``edits`` and ``tests`` hold only
    the events inside their windows (see ``attribution.attribute``), ordered by event time.
    """

    offered: SuggestionOffered
    outcome: SuggestionOutcome | None
    edits: tuple[EditObserved, ...]
    tests: tuple[TestRunCompleted, ...]


class RewardFunction(Protocol):
    """Scores an attributed suggestion: ``(reward, components)``, the named terms of the reward."""

    id: str  # "name@version", e.g. "tab@1"; goes into Reward.reward_fn and the reward_id

    def score(self, a: Attribution) -> tuple[float, dict[str, float]]: ...


def _shown(a: Attribution) -> bool:
    return a.offered.decision is Decision.SHOWN


def _accepted(a: Attribution) -> bool:
    return a.outcome is not None and a.outcome.outcome in (Outcome.ACCEPTED, Outcome.PARTIAL)


class TabReward:
    """``tab@1``: +0.75 accepted or partially accepted, -0.25 rejected or ignored, 0 suppressed.

    Components: ``shown`` and ``accepted``, each 1.0 or 0.0.
    """

    id: str = "tab@1"

    def score(self, a: Attribution) -> tuple[float, dict[str, float]]:
        shown, accepted = _shown(a), _accepted(a)
        components = {"shown": float(shown), "accepted": float(shown and accepted)}
        if not shown:
            return 0.0, components
        return (ACCEPT_REWARD if accepted else REJECT_REWARD), components


def retained_fraction(a: Attribution) -> float:
    """Share of the accepted chars still there after the last edit that reports it, in [0, 1].

    1.0 when no edit in the window reports ``accepted_chars_retained`` (nothing was changed as
    far as we know) or when no chars were accepted; 0.0 when nothing was accepted at all.
    """
    if a.outcome is None or not _accepted(a):
        return 0.0
    reporting = [e for e in a.edits if e.accepted_chars_retained is not None]
    if not reporting or a.outcome.accepted_chars <= 0:
        return 1.0
    # Latest by event time; elapsed time, then event_id, break ties so replays agree.
    last = max(
        reporting,
        key=lambda e: (e.event_time, e.elapsed_since_acceptance_ms or 0, e.event_id),
    )
    retained = last.accepted_chars_retained or 0
    return min(1.0, max(0.0, retained / a.outcome.accepted_chars))


class SurvivalReward:
    """``survival@1``: accepted → 0.75 * retained fraction; rejected or ignored → -0.25;
    suppressed → 0.

    Components: ``accepted`` (1.0 or 0.0) and ``retained_fraction`` (0.0 unless accepted).
    """

    id: str = "survival@1"

    def score(self, a: Attribution) -> tuple[float, dict[str, float]]:
        shown, accepted = _shown(a), _accepted(a)
        fraction = retained_fraction(a) if shown else 0.0
        components = {"accepted": float(shown and accepted), "retained_fraction": fraction}
        if not shown:
            return 0.0, components
        return (ACCEPT_REWARD * fraction if accepted else REJECT_REWARD), components


def tests_term(a: Attribution) -> float:
    """+0.25 * pass fraction - 0.25 * fail fraction over the tests of the attributed runs.

    Counts are pooled over the runs (a run with more tests weighs more); errored tests count as
    failed. 0.0 when there are no runs or they ran no tests.
    """
    passed = sum(t.tests_passed for t in a.tests)
    failed = sum(t.tests_failed + t.tests_errored for t in a.tests)
    total = passed + failed
    if total <= 0:
        return 0.0
    return TESTS_WEIGHT * (passed - failed) / total


class TestsReward:
    """``tests@1``: ``tab@1`` plus :func:`tests_term`; 0 for a suppressed suggestion.

    Components: ``tab`` (the ``tab@1`` reward) and ``tests`` (the test term).
    """

    __test__ = False  # its name starts with "Test"; pytest must not collect it
    id: str = "tests@1"

    def score(self, a: Attribution) -> tuple[float, dict[str, float]]:
        tab, _ = TabReward().score(a)
        tests = tests_term(a) if _shown(a) else 0.0
        return tab + tests, {"tab": tab, "tests": tests}


# The registry: reward function id → implementation (STYLE 5).
REWARD_FUNCTIONS: Mapping[str, RewardFunction] = MappingProxyType(
    {fn.id: fn for fn in (TabReward(), SurvivalReward(), TestsReward())}
)


def reward_functions(ids: Sequence[str]) -> tuple[RewardFunction, ...]:
    """The registered functions for ``ids``, in order.

    Raises :class:`RewardError` for an unknown id (the message lists the known ones) or an id
    given twice (two rewards would share one reward_id).
    """
    if isinstance(ids, str):  # a lone "tab@1" would otherwise be read as five one-letter ids
        raise RewardError(f"reward function ids must be a sequence of ids, not the string {ids!r}")
    unknown = [i for i in ids if i not in REWARD_FUNCTIONS]
    if unknown:
        raise RewardError(
            f"unknown reward function id(s) {unknown}; known ids: {sorted(REWARD_FUNCTIONS)}"
        )
    repeated = sorted({i for i in ids if list(ids).count(i) > 1})
    if repeated:
        raise RewardError(f"reward function id(s) {repeated} given more than once; list each once")
    return tuple(REWARD_FUNCTIONS[i] for i in ids)
