"""simulator.fleet: determinism, causality and consistency of the generated event stream."""

from __future__ import annotations

import re
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import numpy as np
import pytest

from policies.context import CONTEXT_DIM, CONTEXT_SPEC
from schemas.enums import Decision, Outcome
from schemas.events import (
    EditObserved,
    Event,
    RolloutResult,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
)
from simulator import (
    Fleet,
    HeuristicPolicy,
    RequestBatch,
    SimulatorConfig,
    SimulatorError,
    config_with_overrides,
)

E = TypeVar("E", bound=Event)
FleetRun = tuple[Fleet, list[Event]]  # the shared default_run fixture (conftest.py)
SECRET = re.compile(r"AKIA[A-Z2-7]{16}|ghp_[A-Za-z0-9]{36}")


@dataclass(frozen=True)
class FlatPolicy:
    """A test policy with a fixed P(show)."""

    name: str
    version: int
    p: float

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray:
        return np.full(len(batch), self.p)


def _of(events: list[Event], cls: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, cls)]


def _small(**overrides: object) -> SimulatorConfig:
    return config_with_overrides(SimulatorConfig(), {"users.n_users": 100, **overrides})


def test_same_seed_same_events() -> None:
    a = list(Fleet(_small(), HeuristicPolicy()).events(1500))
    b = list(Fleet(_small(), HeuristicPolicy()).events(1500))
    assert a == b  # every field, event ids and times included


def test_different_seed_different_events() -> None:
    a = _of(list(Fleet(_small(), HeuristicPolicy()).events(500)), SuggestionOffered)
    b = _of(list(Fleet(_small(seed=8), HeuristicPolicy()).events(500)), SuggestionOffered)
    assert {e.suggestion_id for e in a}.isdisjoint({e.suggestion_id for e in b})
    assert [e.context for e in a] != [e.context for e in b]


def test_batch_size_does_not_change_the_stream() -> None:
    whole = list(Fleet(_small(), HeuristicPolicy()).events(1200, batch_size=1200))
    assert list(Fleet(_small(), HeuristicPolicy()).events(1200, batch_size=1)) == whole
    assert list(Fleet(_small(), HeuristicPolicy()).events(1200, batch_size=77)) == whole


def test_policy_changes_decisions_not_requests() -> None:
    # Common random numbers: the same seed gives the same requests under any policy.
    a = _of(list(Fleet(_small(), HeuristicPolicy()).events(800)), SuggestionOffered)
    b = _of(list(Fleet(_small(), FlatPolicy("g", 2, 0.3)).events(800)), SuggestionOffered)
    assert [(e.session_id, e.context, e.event_time) for e in a] == [
        (e.session_id, e.context, e.event_time) for e in b
    ]
    assert [e.decision for e in a] != [e.decision for e in b]


def test_stream_is_in_event_time_order(default_run: FleetRun) -> None:
    times = [e.event_time for e in default_run[1]]
    assert times == sorted(times)  # the whole stream, so every session's events too
    start = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)  # sessions.start_time
    assert start <= times[0] < start + timedelta(minutes=1)
    assert times[-1] - times[0] > timedelta(minutes=30)  # simulated time, not wall time


def test_every_event_is_identified(default_run: FleetRun) -> None:
    events = default_run[1]
    assert {e.producer for e in events} == {"simulator/fleet-0"}
    ids = [e.event_id for e in events]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 for i in ids[:500])
    assert all(e.event_time.microsecond % 1000 == 0 for e in events)  # millisecond precision


def test_offers(default_run: FleetRun) -> None:
    offers = _of(default_run[1], SuggestionOffered)
    assert len(offers) == 6000
    for e in offers:
        assert re.fullmatch(r"user-\d+", e.user_id) and re.fullmatch(r"repo-\d+", e.repo_id)
        assert len(e.context) == CONTEXT_DIM and e.context_spec == CONTEXT_SPEC
        assert e.propensity == (0.95 if e.decision is Decision.SHOWN else pytest.approx(0.05))
        assert (e.model_name, e.model_version) == ("suggestion-gate", 0)
        assert e.latency_ms >= 1 and e.suggestion_chars >= 1
        assert e.trigger.value == ("INVOKED" if e.context[7] == 1.0 else "AUTOMATIC")
        if e.privacy_mode:
            assert e.suggestion_text is None
        else:
            assert e.suggestion_text is not None
            assert len(e.suggestion_text) == e.suggestion_chars
            assert e.suggestion_text.count("\n") + 1 == e.suggestion_lines
    assert 0.02 < np.mean([e.privacy_mode for e in offers]) < 0.3
    assert 0.9 < np.mean([e.decision is Decision.SHOWN for e in offers]) < 0.98


def test_planted_secrets(default_run: FleetRun) -> None:
    offers = _of(default_run[1], SuggestionOffered)
    with_secret = [e for e in offers if e.suggestion_text and SECRET.search(e.suggestion_text)]
    assert 0.003 < len(with_secret) / len(offers) < 0.025
    assert default_run[0].ground_truth.summary().secrets_planted >= len(with_secret)
    fleet = Fleet(_small(**{"suggestions.secret_fraction": 1.0}), HeuristicPolicy())
    texts = [e.suggestion_text for e in _of(list(fleet.events(300)), SuggestionOffered)]
    assert all(SECRET.search(t) for t in texts if t is not None)


def test_outcomes_only_for_shown_and_after_their_offer(default_run: FleetRun) -> None:
    offers = {e.suggestion_id: e for e in _of(default_run[1], SuggestionOffered)}
    outcomes = _of(default_run[1], SuggestionOutcome)
    assert len({o.suggestion_id for o in outcomes}) == len(outcomes)  # at most one each
    for o in outcomes:
        offer = offers[o.suggestion_id]
        assert offer.decision is Decision.SHOWN
        assert o.session_id == offer.session_id
        assert o.event_time - offer.event_time == timedelta(milliseconds=o.time_to_decision_ms)
        if o.outcome is Outcome.REJECTED:
            assert o.accepted_chars == 0
        elif o.outcome is Outcome.ACCEPTED:
            assert o.accepted_chars == offer.suggestion_chars
        else:
            assert 1 <= o.accepted_chars <= offer.suggestion_chars
    shown = sum(e.decision is Decision.SHOWN for e in offers.values())
    assert 0.8 * shown < len(outcomes) < shown  # some rejections are ignored (no outcome)


def test_edits_follow_acceptances(default_run: FleetRun) -> None:
    accepted = {
        o.suggestion_id: o
        for o in _of(default_run[1], SuggestionOutcome)
        if o.outcome is not Outcome.REJECTED
    }
    edits = _of(default_run[1], EditObserved)
    assert edits
    by_suggestion: dict[str, list[EditObserved]] = defaultdict(list)
    for e in edits:
        assert e.suggestion_id is not None
        acceptance = accepted[e.suggestion_id]
        assert e.session_id == acceptance.session_id
        assert e.elapsed_since_acceptance_ms is not None and e.elapsed_since_acceptance_ms > 0
        delay = timedelta(milliseconds=e.elapsed_since_acceptance_ms)
        assert e.event_time == acceptance.event_time + delay
        assert e.chars_deleted >= 0 and e.chars_inserted >= 1
        by_suggestion[e.suggestion_id].append(e)
    for suggestion_id, chain in by_suggestion.items():
        retained = [accepted[suggestion_id].accepted_chars]
        for e in chain:
            assert e.accepted_chars_retained is not None
            retained.append(e.accepted_chars_retained)
        assert retained == sorted(retained, reverse=True)  # survival only decays
        assert sum(e.chars_deleted for e in chain) == retained[0] - retained[-1]


def test_test_runs_attribute_earlier_acceptances(default_run: FleetRun) -> None:
    accepted = {
        o.suggestion_id: o
        for o in _of(default_run[1], SuggestionOutcome)
        if o.outcome is not Outcome.REJECTED
    }
    runs = _of(default_run[1], TestRunCompleted)
    assert runs and any(r.suggestion_ids for r in runs)
    attributed: Counter[str] = Counter()
    for run in runs:
        total = run.tests_passed + run.tests_failed + run.tests_errored
        assert total >= 1 and min(run.tests_passed, run.tests_failed, run.tests_errored) >= 0
        start = run.event_time - timedelta(milliseconds=run.duration_ms)
        for suggestion_id in run.suggestion_ids:
            assert accepted[suggestion_id].session_id == run.session_id
            assert accepted[suggestion_id].event_time <= start
        attributed.update(run.suggestion_ids)
    assert max(attributed.values()) == 1  # each acceptance is covered by one run at most
    assert 0 < np.mean([r.tests_failed > 0 for r in runs]) < 0.6


def test_rollout_groups(default_run: FleetRun) -> None:
    rollouts = _of(default_run[1], RolloutResult)
    groups: dict[str, list[RolloutResult]] = defaultdict(list)
    for r in rollouts:
        groups[r.group_id].append(r)
    assert groups and all(len(g) == 8 for g in groups.values())
    for group in groups.values():
        assert len({r.task_id for r in group}) == 1
        assert len({r.rollout_id for r in group}) == 8
        for r in group:
            assert len(r.behaviour_logprobs) == r.completion_tokens
            assert all(lp <= 0 for lp in r.behaviour_logprobs)
            assert 0 <= r.tests_passed <= r.tests_total
            assert set(r.reward_components) == {"tests", "all_tests", "format"}
            assert (r.model_name, r.model_version) == ("agent-lm", 0)
    spread = [np.std([r.tests_passed / r.tests_total for r in g]) for g in groups.values()]
    assert np.mean(spread) > 0  # trials of a group differ: group advantages have signal


def test_ground_truth_matches_the_events(default_run: FleetRun) -> None:
    events = default_run[1]
    offers = _of(events, SuggestionOffered)
    truth = default_run[0].ground_truth.summary()
    shown = sum(e.decision is Decision.SHOWN for e in offers)
    accepted = sum(o.outcome is not Outcome.REJECTED for o in _of(events, SuggestionOutcome))
    assert (truth.requests, truth.shown, truth.accepted) == (len(offers), shown, accepted)
    assert truth.reward_sum == pytest.approx(0.75 * accepted - 0.25 * (shown - accepted))
    table = default_run[0].ground_truth.table()
    assert set(table.suggestion_ids) == {e.suggestion_id for e in offers}
    by_id = {e.suggestion_id: e for e in offers}
    for sid, propensity in zip(table.suggestion_ids[:300], table.propensity, strict=False):
        assert by_id[sid].propensity == propensity


def test_policy_swap_between_batches() -> None:
    fleet = Fleet(_small(), HeuristicPolicy())
    before = fleet.step(500)
    fleet.policy = FlatPolicy("suggestion-gate", 3, 0.0)
    after = fleet.step(2000) + fleet.flush()
    versions = {e.model_version for e in _of(before, SuggestionOffered)}
    assert versions == {0}
    late = _of(after, SuggestionOffered)[-1000:]
    assert {e.model_version for e in late} == {3}
    assert np.mean([e.decision is Decision.SHOWN for e in late]) < 0.1  # floor: ~5 % shown
    by_version = fleet.ground_truth.by_version()
    assert by_version[0].requests == 500 and by_version[3].requests == 2000
    assert by_version[3].shown_per_1000 < 100 < by_version[0].shown_per_1000


def test_flush_empties_the_pending_events() -> None:
    fleet = Fleet(_small(), HeuristicPolicy())
    stepped = fleet.step(300)
    flushed = fleet.flush()
    assert flushed and fleet.flush() == []
    assert [e.event_time for e in stepped + flushed] == sorted(
        e.event_time for e in stepped + flushed
    )


def test_start_time_now() -> None:
    fleet = Fleet(_small(**{"sessions.start_time": "now"}), HeuristicPolicy())
    first = fleet.events(10).__next__()
    assert abs(first.event_time - datetime.now(UTC)) < timedelta(minutes=5)


def test_step_needs_requests() -> None:
    with pytest.raises(SimulatorError, match="n_requests ≥ 1"):
        Fleet(_small(), HeuristicPolicy()).step(0)


def test_policy_returning_garbage_is_reported() -> None:
    fleet = Fleet(_small(), FlatPolicy("bad", 1, 2.0))
    with pytest.raises(SimulatorError, match="outside"):
        fleet.step(10)


def test_router_splits_users_between_versions() -> None:
    """A router serves each user with one policy; requests log it; truth is kept per version."""
    production, canary = (
        HeuristicPolicy(version=1),
        HeuristicPolicy(version=2, show_probability=0.5),
    )
    fleet = Fleet(SimulatorConfig(), production)
    canary_users = set(fleet.population.user_ids[::4])
    fleet.router = lambda user_id: canary if user_id in canary_users else production
    events = list(fleet.events(3000, batch_size=500))
    offers = [e for e in events if isinstance(e, SuggestionOffered)]
    users = {o.user_id: o.model_version for o in offers}
    assert set(users.values()) == {1, 2}
    by_version = fleet.ground_truth.by_version()
    assert sum(s.requests for s in by_version.values()) == 3000
    assert by_version[2].requests == sum(o.model_version == 2 for o in offers)
    # The half-showing canary shows a visibly smaller share of its requests.
    assert by_version[2].shown_per_1000 < by_version[1].shown_per_1000 - 200
