"""Attribution: folding events in any order, windows, lateness, and the Reward events built."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from datetime import UTC, datetime

import pytest
from fastavro.validation import validate

from processors.rewards.attribution import (
    REWARD_NAMESPACE,
    PendingSuggestion,
    Watermark,
    Windows,
    add,
    attribute,
    deadline_ms,
    is_late,
    rewards,
    suggestion_ids_of,
)
from processors.rewards.errors import RewardError
from processors.rewards.functions import REWARD_FUNCTIONS, reward_functions
from schemas.catalog import parsed_schema
from schemas.enums import Decision, Outcome, RewardSource
from schemas.events import Event, Reward
from tests.processors.rewards.reward_events import (
    PRODUCER,
    SESSION,
    SUGGESTION,
    T0_MS,
    at,
    edit,
    offer,
    outcome,
    rollout,
    run_completed,
)

ATTRIBUTED_AT = datetime(2026, 1, 1, 1, tzinfo=UTC)
WINDOWS = Windows()


def events() -> list[Event]:
    return [
        offer(),
        outcome(),
        edit(5_000, 30, "e-edit-1"),
        edit(5_000, 20, "e-edit-2"),  # same time: event_id breaks the tie
        run_completed(60_000, 3, 1, "e-tests"),
    ]


def fold(evs: list[Event]) -> PendingSuggestion:
    pending: PendingSuggestion | None = None
    for e in evs:
        pending = add(pending, e)
    assert pending is not None
    return pending


def test_add_is_order_independent() -> None:
    states = {fold(list(p)) for p in itertools.permutations(events())}
    assert len(states) == 1
    (state,) = states
    assert [e.event_id for e in state.edits] == ["e-edit-1", "e-edit-2"]


def test_add_is_idempotent() -> None:
    once = fold(events())
    assert fold(events() + events()) == once
    for e in events():
        assert add(once, e) == once


def test_add_keeps_the_earliest_offer_and_outcome() -> None:
    late = outcome(Outcome.REJECTED, at_ms=2_000, event_id="e-outcome-2")
    for order in ([outcome(), late], [late, outcome()]):
        assert fold([offer(), *order]).outcome == outcome()


def test_add_does_not_modify_its_input() -> None:
    pending = fold([offer()])
    add(pending, outcome())
    assert pending == PendingSuggestion(offered=offer())


def test_add_rejects_events_of_other_suggestions_or_none() -> None:
    pending = fold([offer()])
    with pytest.raises(RewardError, match="sug-1"):
        add(pending, run_completed(1, 1, 0, "t", suggestion_ids=("other",)))
    with pytest.raises(RewardError, match="names no suggestion"):
        add(pending, edit(1, 1, "e", suggestion_id=None))
    with pytest.raises(RewardError, match="not a suggestion event"):
        add(pending, rollout("ro-1", {}))


def test_suggestion_ids_of() -> None:
    assert suggestion_ids_of(offer()) == (SUGGESTION,)
    assert suggestion_ids_of(outcome()) == (SUGGESTION,)
    assert suggestion_ids_of(edit(1, 1, "e")) == (SUGGESTION,)
    assert suggestion_ids_of(edit(1, 1, "e", suggestion_id=None)) == ()
    run = run_completed(1, 1, 0, "t", suggestion_ids=("a", "b", "a"))
    assert suggestion_ids_of(run) == ("a", "b")
    with pytest.raises(RewardError):
        suggestion_ids_of(rollout("ro-1", {}))


@pytest.mark.parametrize(
    "pending",
    [
        PendingSuggestion(),
        PendingSuggestion(outcome=outcome()),  # the outcome before its offer
        fold(events()),
    ],
)
def test_json_round_trip(pending: PendingSuggestion) -> None:
    text = pending.to_json()
    assert " " not in text.replace("vscode", "")  # compact
    assert PendingSuggestion.from_json(text) == pending


@pytest.mark.parametrize("text", ["", "[]", "{}", '{"offered": {"x": 1}}'])
def test_from_json_rejects_garbage(text: str) -> None:
    with pytest.raises(RewardError, match="PendingSuggestion"):
        PendingSuggestion.from_json(text)


def test_deadline_needs_the_offer() -> None:
    assert deadline_ms(PendingSuggestion(outcome=outcome()), WINDOWS) is None
    assert deadline_ms(fold(events()), WINDOWS) == T0_MS + 600_000
    short = Windows(outcome_ms=10, edits_ms=700_000, tests_ms=20)
    assert deadline_ms(fold(events()), short) == T0_MS + 700_000


def test_is_late() -> None:
    watermark = T0_MS + 100_000
    assert is_late(watermark - 30_001, watermark, WINDOWS)
    assert not is_late(watermark - 30_000, watermark, WINDOWS)
    assert not is_late(T0_MS, None, WINDOWS)


def test_watermark_only_advances() -> None:
    mark = Watermark()
    assert mark.value_ms is None
    for t in (5, 9, 3):
        mark.observe(t)
    assert mark.value_ms == 9


def test_windows_reject_negative_values() -> None:
    with pytest.raises(RewardError, match="edits_ms"):
        Windows(edits_ms=-1)


def test_attribute_filters_by_window() -> None:
    windows = Windows(outcome_ms=60_000, edits_ms=10_000, tests_ms=100_000)
    pending = fold(
        [
            offer(),
            outcome(at_ms=1_000),
            edit(500, 1, "e-before-outcome"),
            edit(11_000, 2, "e-last-inside"),
            edit(11_001, 3, "e-after"),
            run_completed(-1, 1, 0, "t-before-offer"),
            run_completed(100_000, 1, 0, "t-last-inside"),
            run_completed(100_001, 1, 0, "t-after"),
        ]
    )
    a = attribute(pending, windows)
    assert a.offered == offer()
    assert a.outcome == outcome(at_ms=1_000)
    assert [e.event_id for e in a.edits] == ["e-last-inside"]
    assert [t.event_id for t in a.tests] == ["t-last-inside"]


def test_attribute_drops_a_late_outcome_and_its_edits() -> None:
    pending = fold([offer(), outcome(at_ms=60_001), edit(61_000, 1, "e")])
    a = attribute(pending, WINDOWS)
    assert a.outcome is None
    assert a.edits == ()
    assert REWARD_FUNCTIONS["tab@1"].score(a)[0] == -0.25  # counts as ignored


def test_attribute_ignores_edits_after_the_deadline() -> None:
    windows = Windows(outcome_ms=60_000, edits_ms=120_000, tests_ms=100_000)
    pending = fold(
        [offer(), outcome(at_ms=50_000), edit(120_000, 1, "e-in"), edit(130_000, 1, "x")]
    )
    assert [e.event_id for e in attribute(pending, windows).edits] == ["e-in"]


def test_attribute_needs_the_offer() -> None:
    with pytest.raises(RewardError, match="SuggestionOffered"):
        attribute(PendingSuggestion(outcome=outcome()), WINDOWS)


def suggestion_rewards() -> list[Reward]:
    a = attribute(fold(events()), WINDOWS)
    return rewards(a, reward_functions(list(REWARD_FUNCTIONS)), ATTRIBUTED_AT, PRODUCER)


def test_rewards_copy_the_offer() -> None:
    out = suggestion_rewards()
    assert [r.reward_fn for r in out] == ["tab@1", "survival@1", "tests@1"]
    first = out[0]
    o = offer()
    assert first.source is RewardSource.SUGGESTION
    assert (first.source_id, first.session_id, first.group_id) == (SUGGESTION, SESSION, None)
    assert (first.model_name, first.model_version) == (o.model_name, o.model_version)
    assert (first.decision, first.propensity, first.context) == (
        Decision.SHOWN,
        o.propensity,
        o.context,
    )
    assert (first.context_spec, first.language, first.ide, first.trigger) == (
        o.context_spec,
        o.language,
        o.ide,
        o.trigger,
    )
    assert (first.event_time, first.attributed_at) == (at(0), ATTRIBUTED_AT)
    assert (first.advantage, first.producer) == (None, PRODUCER)
    assert [r.reward for r in out] == pytest.approx([0.75, 0.75 * 0.5, 0.75 + 0.125])


def test_rewards_validate_against_the_schema() -> None:
    schema = parsed_schema("Reward")
    for r in suggestion_rewards():
        assert validate(r.to_record(), schema, raise_errors=True)


def test_reward_ids_are_deterministic() -> None:
    first, second = suggestion_rewards(), suggestion_rewards()
    ids = [r.reward_id for r in first]
    assert ids == [r.reward_id for r in second]
    assert len(set(ids)) == len(ids)  # a different function gives a different id
    assert ids[0] == str(uuid.uuid5(REWARD_NAMESPACE, f"{SUGGESTION}:tab@1"))
    assert first[0].event_id != second[0].event_id  # a recomputation is a new event


def test_reward_ids_differ_by_suggestion() -> None:
    a = attribute(fold(events()), WINDOWS)
    other = dataclasses.replace(a, offered=dataclasses.replace(a.offered, suggestion_id="sug-2"))
    fns = reward_functions(["tab@1"])
    assert (
        rewards(a, fns, ATTRIBUTED_AT, PRODUCER)[0].reward_id
        != rewards(other, fns, ATTRIBUTED_AT, PRODUCER)[0].reward_id
    )


def test_rewards_reject_a_naive_time() -> None:
    a = attribute(fold(events()), WINDOWS)
    with pytest.raises(RewardError, match="naive"):
        rewards(a, reward_functions(["tab@1"]), datetime(2026, 1, 1), PRODUCER)


def test_combined_watermark_is_the_slowest_active_input() -> None:
    from processors.rewards.attribution import combined_watermark

    marks = {"a": 100, "b": 40, "c": 70}
    assert combined_watermark(marks) == 40
    assert combined_watermark(marks, idle={"b"}) == 70
    assert combined_watermark(marks, idle={"a", "b", "c"}) == 100  # all idle: the furthest
    assert combined_watermark({}) is None
