"""Rewards from use (DESIGN §12): a served completion joined with the users' reactions to it.

The agent model's serving replicas emit one ``AgentCompletion`` per choice they serve; clients
send ``AgentFeedback`` events naming it (``completion_id``). Both are keyed by session_id, so
they are co-partitioned, and the joiner keeps one :class:`PendingCompletion` per completion id,
exactly as it keeps a suggestion's offer and outcomes (``attribution``): events are folded in
any order, and the completion is attributed once the partition's watermark passes its deadline
(completion time + ``feedback_ms``); only reactions inside that window count. A reaction later
than the allowed lateness goes to ``dlq.late``; reactions whose completion never arrives are
orphans, expired like a suggestion's.

``agent_use@1`` (:class:`UseReward`) scores the reactions: each kind counts once, and the sum
of their weights is clipped to [-1, 1]; a completion nobody reacted to scores 0 (no signal).
Never change what a published id computes: bump the version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from contracts.advantages import USE_REWARD_FN
from processors.rewards.attribution import check_aware, check_windows, reward_id
from processors.rewards.errors import RewardError
from schemas.enums import AgentReaction, RewardSource
from schemas.events import AgentCompletion, AgentFeedback, Event, Reward
from schemas.records import encode_time

# agent_use@1's weight per reaction kind (each kind counts once per completion).
REACTION_WEIGHTS = MappingProxyType(
    {
        AgentReaction.ACCEPTED: 0.5,
        AgentReaction.EDIT_PERSISTED: 0.25,
        AgentReaction.TESTS_PASSED: 0.25,
        AgentReaction.REVERTED: -0.5,
        AgentReaction.DISSATISFIED_FOLLOWUP: -0.5,
        AgentReaction.TESTS_FAILED: -0.25,
    }
)


@dataclass(frozen=True)
class FeedbackWindows:
    """Event-time windows of the completion join, in milliseconds: a reaction counts within
    ``feedback_ms`` after its completion; an event older than the watermark minus
    ``allowed_lateness_ms`` is late."""

    feedback_ms: int = 300_000
    allowed_lateness_ms: int = 30_000

    def __post_init__(self) -> None:
        check_windows(self, "feedback windows")


@dataclass(frozen=True)
class PendingCompletion:
    """A completion and the reactions seen so far; either may be missing. Of several copies of
    the completion the earliest (event_time, event_id) wins; ``feedback`` holds each event_id
    once, sorted by (event_time, event_id): the state depends on the set of events only."""

    completion: AgentCompletion | None = None
    feedback: tuple[AgentFeedback, ...] = ()


def completion_ids_of(event: Event) -> tuple[str, ...]:
    """The completion ids ``event`` is attributed to; RewardError for any other event type."""
    if isinstance(event, AgentCompletion | AgentFeedback):
        return (event.completion_id,)
    raise RewardError(
        f"{type(event).__name__} is not a completion event; the completion join takes "
        "AgentCompletion and AgentFeedback."
    )


def _order(event: Event) -> tuple[datetime, str]:
    return event.event_time, event.event_id


def add_completion_event(pending: PendingCompletion | None, event: Event) -> PendingCompletion:
    """``pending`` with ``event`` folded in (idempotent by event_id, order-independent).
    RewardError when ``event`` belongs to another completion or is of another type."""
    (cid,) = completion_ids_of(event)
    pending = pending or PendingCompletion()
    known = next((e.completion_id for e in (pending.completion, *pending.feedback) if e), None)
    if known is not None and known != cid:
        raise RewardError(
            f"{type(event).__name__} {event.event_id} is for completion {cid!r}, not {known!r}; "
            "key the pending state by completion_id."
        )
    if isinstance(event, AgentCompletion):
        current = pending.completion
        if current is not None and _order(current) <= _order(event):
            return pending
        return PendingCompletion(event, pending.feedback)
    assert isinstance(event, AgentFeedback)
    if any(f.event_id == event.event_id for f in pending.feedback):
        return pending
    return PendingCompletion(
        pending.completion, tuple(sorted((*pending.feedback, event), key=_order))
    )


def completion_deadline_ms(pending: PendingCompletion, windows: FeedbackWindows) -> int | None:
    """When the completion is attributed: its event time + ``feedback_ms``; None until known."""
    if pending.completion is None:
        return None
    return encode_time(pending.completion.event_time) + windows.feedback_ms


def reactions_in_window(
    pending: PendingCompletion, windows: FeedbackWindows
) -> tuple[AgentFeedback, ...]:
    """The reactions from the completion to ``feedback_ms`` after it. RewardError while the
    completion is unknown."""
    if pending.completion is None:
        raise RewardError(
            "cannot attribute a completion whose AgentCompletion has not arrived; wait for it or "
            "dead-letter the orphan feedback."
        )
    start = encode_time(pending.completion.event_time)
    return tuple(
        f
        for f in pending.feedback
        if start <= encode_time(f.event_time) <= start + windows.feedback_ms
    )


class UseReward:
    """``agent_use@1``: the clipped sum of :data:`REACTION_WEIGHTS` over the reaction kinds seen
    (each once). Components: one per reaction kind seen (its weight)."""

    id: str = USE_REWARD_FN

    def score(self, reactions: Sequence[AgentFeedback]) -> tuple[float, dict[str, float]]:
        kinds = dict.fromkeys(f.reaction for f in reactions)
        components = {kind.value.lower(): REACTION_WEIGHTS[kind] for kind in kinds}
        return max(-1.0, min(1.0, sum(components.values()))), components


USE_REWARD = UseReward()


def completion_rewards(
    pending: PendingCompletion,
    windows: FeedbackWindows,
    attributed_at: datetime,
    producer: str,
    function: UseReward = USE_REWARD,
) -> list[Reward]:
    """The COMPLETION Reward of an attributed completion (one per function; one today).
    ``event_time`` is the completion's and ``reward_id`` is deterministic, as for suggestions."""
    check_aware(attributed_at)
    reactions = reactions_in_window(pending, windows)
    completion = pending.completion
    assert completion is not None  # reactions_in_window checked
    value, components = function.score(reactions)
    return [
        Reward(
            event_time=completion.event_time,
            producer=producer,
            reward_id=reward_id(completion.completion_id, function.id),
            source=RewardSource.COMPLETION,
            source_id=completion.completion_id,
            session_id=completion.session_id,
            user_id=completion.user_id,
            model_name=completion.model_name,
            model_version=completion.model_version,
            reward=float(value),
            reward_components=components,
            reward_fn=function.id,
            attributed_at=attributed_at,
        )
    ]
