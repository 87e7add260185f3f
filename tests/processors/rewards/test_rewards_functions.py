"""The reward functions on hand-built attributions with known answers (DESIGN §5)."""

from __future__ import annotations

import pytest

from processors.rewards.errors import RewardError
from processors.rewards.functions import (
    REWARD_FUNCTIONS,
    Attribution,
    RewardFunction,
    reward_functions,
)
from schemas.enums import Decision, Outcome
from schemas.events import EditObserved, TestRunCompleted
from tests.processors.rewards.reward_events import edit, offer, outcome, run_completed


def attribution(
    decision: Decision = Decision.SHOWN,
    kind: Outcome | None = Outcome.ACCEPTED,
    accepted_chars: int = 40,
    edits: tuple[EditObserved, ...] = (),
    tests: tuple[TestRunCompleted, ...] = (),
) -> Attribution:
    return Attribution(
        offered=offer(decision),
        outcome=None if kind is None else outcome(kind, accepted_chars=accepted_chars),
        edits=edits,
        tests=tests,
    )


def score(fn_id: str, a: Attribution) -> tuple[float, dict[str, float]]:
    return REWARD_FUNCTIONS[fn_id].score(a)


@pytest.mark.parametrize(
    ("decision", "kind", "expected"),
    [
        (Decision.SHOWN, Outcome.ACCEPTED, 0.75),
        (Decision.SHOWN, Outcome.PARTIAL, 0.75),
        (Decision.SHOWN, Outcome.REJECTED, -0.25),
        (Decision.SHOWN, None, -0.25),  # ignored: no outcome by the deadline
        (Decision.SUPPRESSED, None, 0.0),
    ],
)
def test_tab_pays_for_acceptance(decision: Decision, kind: Outcome | None, expected: float) -> None:
    reward, components = score("tab@1", attribution(decision, kind))
    assert reward == expected
    assert components["shown"] == float(decision is Decision.SHOWN)
    assert components["accepted"] == float(expected > 0)


def test_tab_break_even_is_accept_probability_one_quarter() -> None:
    accept, _ = score("tab@1", attribution(kind=Outcome.ACCEPTED))
    reject, _ = score("tab@1", attribution(kind=Outcome.REJECTED))
    assert 0.25 * accept + 0.75 * reject == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("decision", "kind", "expected", "accepted"),
    [
        (Decision.SHOWN, Outcome.ACCEPTED, 0.75, 1.0),  # no edits: all retained
        (Decision.SHOWN, Outcome.REJECTED, -0.25, 0.0),
        (Decision.SHOWN, None, -0.25, 0.0),
        (Decision.SUPPRESSED, None, 0.0, 0.0),
    ],
)
def test_survival_without_edits(
    decision: Decision, kind: Outcome | None, expected: float, accepted: float
) -> None:
    reward, components = score("survival@1", attribution(decision, kind))
    assert reward == expected
    assert components == {"accepted": accepted, "retained_fraction": accepted}


def test_survival_uses_the_last_edit() -> None:
    edits = (edit(2_000, 10, "e-1"), edit(9_000, 30, "e-3"), edit(5_000, 20, "e-2"))
    reward, components = score("survival@1", attribution(accepted_chars=40, edits=edits))
    assert components == {"accepted": 1.0, "retained_fraction": 0.75}
    assert reward == pytest.approx(0.75 * 0.75)


def test_survival_partial_and_clamping() -> None:
    partial = attribution(kind=Outcome.PARTIAL, accepted_chars=20, edits=(edit(2_000, 5, "e"),))
    assert score("survival@1", partial)[0] == pytest.approx(0.75 * 0.25)
    over = attribution(accepted_chars=20, edits=(edit(2_000, 50, "e"),))
    assert score("survival@1", over)[1]["retained_fraction"] == 1.0


def test_survival_ignores_edits_that_do_not_report_retention() -> None:
    edits = (edit(2_000, 20, "e-1"), edit(3_000, None, "e-2"))
    assert score("survival@1", attribution(edits=edits))[1]["retained_fraction"] == 0.5
    only_unknown = attribution(edits=(edit(3_000, None, "e-2"),))
    assert score("survival@1", only_unknown)[1]["retained_fraction"] == 1.0


def test_tests_bonus_pools_runs() -> None:
    runs = (run_completed(5_000, 6, 1, "t-1", errored=1), run_completed(6_000, 2, 0, "t-2"))
    reward, components = score("tests@1", attribution(tests=runs))
    # 8 passed, 2 failed or errored out of 10: +0.25 * 0.8 - 0.25 * 0.2 = 0.15
    assert components == {"tab": 0.75, "tests": pytest.approx(0.15)}
    assert reward == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("decision", "kind", "runs", "expected"),
    [
        (Decision.SHOWN, Outcome.ACCEPTED, (), 0.75),
        (Decision.SHOWN, Outcome.REJECTED, ((0, 4),), -0.5),
        (Decision.SHOWN, None, ((4, 0),), 0.0),
        (Decision.SHOWN, Outcome.ACCEPTED, ((0, 0),), 0.75),  # a run with no tests: no term
        (Decision.SUPPRESSED, None, ((4, 0),), 0.0),
    ],
)
def test_tests_cases(
    decision: Decision,
    kind: Outcome | None,
    runs: tuple[tuple[int, int], ...],
    expected: float,
) -> None:
    tests = tuple(run_completed(5_000, p, f, f"t-{i}") for i, (p, f) in enumerate(runs))
    reward, components = score("tests@1", attribution(decision, kind, tests=tests))
    assert reward == pytest.approx(expected)
    assert reward == pytest.approx(components["tab"] + components["tests"])


def test_registry_ids_match_functions() -> None:
    assert set(REWARD_FUNCTIONS) == {"tab@1", "survival@1", "tests@1"}
    for fn_id, fn in REWARD_FUNCTIONS.items():
        assert fn.id == fn_id
        checked: RewardFunction = fn
        assert checked is fn


def test_reward_functions_in_order() -> None:
    fns = reward_functions(["tests@1", "tab@1"])
    assert [f.id for f in fns] == ["tests@1", "tab@1"]
    assert reward_functions([]) == ()


def test_unknown_reward_function_names_the_known_ones() -> None:
    with pytest.raises(RewardError, match=r"'nope@1'.*survival@1.*tab@1.*tests@1"):
        reward_functions(["tab@1", "nope@1"])


@pytest.mark.parametrize("ids", [["tab@1", "tab@1"], "tab@1"])
def test_reward_functions_rejects_repeats_and_bare_strings(ids: list[str] | str) -> None:
    with pytest.raises(RewardError):
        reward_functions(ids)
