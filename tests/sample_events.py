"""Small valid events for tests of the Kafka path (one per kind the SDK emits)."""

from __future__ import annotations

import uuid

from schemas.enums import AgentReaction, Decision, Outcome, SuggestionTrigger
from schemas.events import (
    AgentCompletion,
    AgentFeedback,
    EditObserved,
    Event,
    RolloutResult,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
)

PRODUCER = "tests/sample"


def offered(session: str = "s-1", **overrides: object) -> SuggestionOffered:
    fields: dict[str, object] = {
        "producer": PRODUCER, "suggestion_id": str(uuid.uuid4()), "request_id": "r-1",
        "session_id": session, "user_id": "user-1", "repo_id": "repo-1", "language": "python",
        "ide": "vscode", "trigger": SuggestionTrigger.AUTOMATIC, "model_name": "gate",
        "model_version": 0, "decision": Decision.SHOWN, "propensity": 0.9,
        "context": (0.5, -1.0, 2.0), "context_spec": "ctx@1", "suggestion_chars": 42,
        "suggestion_lines": 2, "latency_ms": 80, "privacy_mode": False,
        "suggestion_text": "return a + b\n",
    }  # fmt: skip
    fields.update(overrides)
    return SuggestionOffered(**fields)  # type: ignore[arg-type]  # overrides are test-chosen


def one_of_each(session: str = "s-1") -> list[Event]:
    first = offered(session)
    return [
        first,
        SuggestionOutcome(
            producer=PRODUCER, suggestion_id=first.suggestion_id, session_id=session,
            outcome=Outcome.ACCEPTED, accepted_chars=42, time_to_decision_ms=900,
        ),
        EditObserved(
            producer=PRODUCER, session_id=session, suggestion_id=first.suggestion_id,
            chars_inserted=3, chars_deleted=1, accepted_chars_retained=40,
            elapsed_since_acceptance_ms=30_000,
        ),
        TestRunCompleted(
            producer=PRODUCER, session_id=session, run_id="run-1", tests_passed=9,
            tests_failed=1, tests_errored=0, duration_ms=1200,
            suggestion_ids=(first.suggestion_id,),
        ),
        RolloutResult(
            producer=PRODUCER, rollout_id="ro-1", task_id="t-1", group_id="g-1",
            model_name="agent", model_version=3, prompt_tokens=100, completion_tokens=50,
            tool_calls=2, tests_passed=3, tests_total=4, reward_components={"tests": 0.75},
            behaviour_logprobs=(-0.5, -1.25), duration_ms=5000,
        ),
    ]  # fmt: skip


def served(session: str = "s-1", **overrides: object) -> AgentCompletion:
    """A completion the agent model served (with its text and tokens) in `session`."""
    fields: dict[str, object] = {
        "producer": "serve/t", "completion_id": f"cmpl-{uuid.uuid4().hex[:12]}:0",
        "request_id": "cmpl-r", "session_id": session, "user_id": "user-1", "api_key": "ide",
        "model_name": "agent-lm", "model_version": 1, "channel": "production",
        "endpoint": "completions", "choice_index": 0, "prompt_tokens": 3,
        "cached_prompt_tokens": 0, "completion_tokens": 2, "prompt_token_ids": (1, 2, 3),
        "completion_token_ids": (4, 2), "behaviour_logprobs": (-0.5, -0.1),
        "completion_text": "def f(): pass", "temperature": 1.0, "top_p": 1.0, "max_tokens": 8,
        "finish_reason": "stop", "latency_ms": 5, "privacy_mode": False,
    }  # fmt: skip
    fields.update(overrides)
    return AgentCompletion(**fields)  # type: ignore[arg-type]  # overrides are test-chosen


def reacted(completion: AgentCompletion, **overrides: object) -> AgentFeedback:
    """A reaction (ACCEPTED) to `completion`, by its user, in its session."""
    fields: dict[str, object] = {
        "producer": PRODUCER, "completion_id": completion.completion_id,
        "session_id": completion.session_id, "user_id": completion.user_id,
        "reaction": AgentReaction.ACCEPTED, "event_time": completion.event_time,
    }  # fmt: skip
    fields.update(overrides)
    return AgentFeedback(**fields)  # type: ignore[arg-type]  # overrides are test-chosen
