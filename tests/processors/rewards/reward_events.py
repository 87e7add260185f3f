"""Hand-built suggestion and rollout events for the reward tests, at fixed event times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.enums import Decision, Outcome, SuggestionTrigger
from schemas.events import (
    EditObserved,
    RolloutResult,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
)

PRODUCER = "tests/rewards"
SUGGESTION = "sug-1"
SESSION = "s-1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
T0_MS = 1_767_225_600_000  # T0 in epoch ms


def at(ms: int) -> datetime:
    """T0 + ``ms`` milliseconds."""
    return T0 + timedelta(milliseconds=ms)


def offer(
    decision: Decision = Decision.SHOWN, at_ms: int = 0, event_id: str = "e-offer"
) -> SuggestionOffered:
    return SuggestionOffered(
        event_id=event_id, event_time=at(at_ms), producer=PRODUCER, suggestion_id=SUGGESTION,
        request_id="r-1", session_id=SESSION, user_id="u-1", repo_id="repo-1",
        language="python", ide="vscode", trigger=SuggestionTrigger.AUTOMATIC, model_name="gate",
        model_version=7, decision=decision, propensity=0.8, context=(0.5, -1.0, 2.0),
        context_spec="ctx@1", suggestion_chars=40, suggestion_lines=2, latency_ms=80,
        privacy_mode=True,
    )  # fmt: skip


def outcome(
    kind: Outcome = Outcome.ACCEPTED,
    at_ms: int = 1_000,
    accepted_chars: int = 40,
    event_id: str = "e-outcome",
) -> SuggestionOutcome:
    return SuggestionOutcome(
        event_id=event_id, event_time=at(at_ms), producer=PRODUCER, suggestion_id=SUGGESTION,
        session_id=SESSION, outcome=kind, accepted_chars=accepted_chars, time_to_decision_ms=at_ms,
    )  # fmt: skip


def edit(
    at_ms: int, retained: int | None, event_id: str, suggestion_id: str | None = SUGGESTION
) -> EditObserved:
    return EditObserved(
        event_id=event_id, event_time=at(at_ms), producer=PRODUCER, session_id=SESSION,
        suggestion_id=suggestion_id, chars_inserted=1, chars_deleted=2,
        accepted_chars_retained=retained, elapsed_since_acceptance_ms=None,
    )  # fmt: skip


def run_completed(
    at_ms: int,
    passed: int,
    failed: int,
    event_id: str,
    errored: int = 0,
    suggestion_ids: tuple[str, ...] = (SUGGESTION,),
) -> TestRunCompleted:
    return TestRunCompleted(
        event_id=event_id, event_time=at(at_ms), producer=PRODUCER, session_id=SESSION,
        run_id=f"run-{event_id}", tests_passed=passed, tests_failed=failed,
        tests_errored=errored, duration_ms=500, suggestion_ids=suggestion_ids,
    )  # fmt: skip


def rollout(
    rollout_id: str, components: dict[str, float], at_ms: int = 0, group_id: str = "g-1"
) -> RolloutResult:
    return RolloutResult(
        event_id=f"e-{rollout_id}", event_time=at(at_ms), producer=PRODUCER,
        rollout_id=rollout_id, task_id="t-1", group_id=group_id, model_name="agent",
        model_version=3, prompt_tokens=100, completion_tokens=50, tool_calls=2, tests_passed=1,
        tests_total=2, reward_components=components, behaviour_logprobs=(-0.5,),
        duration_ms=5000,
    )  # fmt: skip
