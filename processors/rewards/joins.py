"""The event-time joins the reward joiner runs, behind one interface (:class:`Join`).

A join has an *anchor* event (a suggestion's offer, a served completion) and events that refer
to it by id (outcomes, edits, test runs; feedback). The joiner (``processors.joiner``) keeps the
pending state per id, watermarks per input topic, deadlines, orphans and done markers the same
way for every join; what differs — which ids an event names, how it folds in, when the anchor
is due and what it is worth — is the join's. :data:`SUGGESTIONS` wraps ``attribution``,
:class:`CompletionJoin` wraps ``served``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from processors.rewards.attribution import (
    Lateness,
    PendingSuggestion,
    Windows,
    add,
    attribute,
    deadline_ms,
    rewards,
    suggestion_ids_of,
)
from processors.rewards.functions import RewardFunction
from processors.rewards.served import (
    FeedbackWindows,
    PendingCompletion,
    add_completion_event,
    completion_deadline_ms,
    completion_ids_of,
    completion_rewards,
)
from schemas.events import Event, Reward
from schemas.records import encode_time
from streams.topics import COMPLETION_TOPICS, TELEMETRY_TOPICS


class Join(Protocol):
    """One kind of join. ``topics[0]`` carries the anchor; its watermark decides when a re-sent
    anchor would be late (done markers) and when an orphan can no longer be joined."""

    @property
    def topics(self) -> tuple[str, ...]: ...

    @property
    def windows(self) -> Lateness: ...

    def ids_of(self, event: Event) -> tuple[str, ...]:
        """The anchor ids ``event`` belongs to (none: it joins nothing)."""
        ...

    def add(self, pending: Any | None, event: Event) -> Any:
        """``pending`` (None: nothing yet) with ``event`` folded in; pure and idempotent."""
        ...

    def deadline_ms(self, pending: Any) -> int | None:
        """Event time at which the anchor is attributed; None until the anchor is known."""
        ...

    def anchor_ms(self, pending: Any) -> int | None:
        """The anchor's event time; None for an orphan."""
        ...

    def first_event_ms(self, pending: Any) -> int | None:
        """The earliest event time of the events that refer to the anchor."""
        ...

    def rewards(self, pending: Any, attributed_at: datetime, producer: str) -> list[Reward]:
        """The Rewards of a due anchor."""
        ...

    def held_events(self, pending: Any) -> list[Event]:
        """An orphan's events (for state written without its source records)."""
        ...


@dataclass(frozen=True)
class SuggestionJoin:
    """Offers with their outcomes, edits and test runs (``attribution``), scored by
    ``functions``."""

    functions: tuple[RewardFunction, ...]
    windows: Windows = field(default_factory=Windows)
    topics: tuple[str, ...] = TELEMETRY_TOPICS

    def ids_of(self, event: Event) -> tuple[str, ...]:
        return suggestion_ids_of(event)

    def add(self, pending: Any | None, event: Event) -> Any:
        return add(pending, event)

    def deadline_ms(self, pending: Any) -> int | None:
        return deadline_ms(pending, self.windows)

    def anchor_ms(self, pending: Any) -> int | None:
        offered = pending.offered
        return None if offered is None else encode_time(offered.event_time)

    def first_event_ms(self, pending: Any) -> int | None:
        return _earliest(self.held_events(pending))

    def rewards(self, pending: Any, attributed_at: datetime, producer: str) -> list[Reward]:
        return rewards(attribute(pending, self.windows), self.functions, attributed_at, producer)

    def held_events(self, pending: Any) -> list[Event]:
        assert isinstance(pending, PendingSuggestion)
        held: list[Event] = [e for e in (pending.outcome, *pending.edits) if e]
        return [*held, *pending.tests]


@dataclass(frozen=True)
class CompletionJoin:
    """Served completions with the users' feedback (``served``), scored by ``agent_use@1``."""

    windows: FeedbackWindows = field(default_factory=FeedbackWindows)
    topics: tuple[str, ...] = COMPLETION_TOPICS

    def ids_of(self, event: Event) -> tuple[str, ...]:
        return completion_ids_of(event)

    def add(self, pending: Any | None, event: Event) -> Any:
        return add_completion_event(pending, event)

    def deadline_ms(self, pending: Any) -> int | None:
        return completion_deadline_ms(pending, self.windows)

    def anchor_ms(self, pending: Any) -> int | None:
        completion = pending.completion
        return None if completion is None else encode_time(completion.event_time)

    def first_event_ms(self, pending: Any) -> int | None:
        return _earliest(self.held_events(pending))

    def rewards(self, pending: Any, attributed_at: datetime, producer: str) -> list[Reward]:
        return completion_rewards(pending, self.windows, attributed_at, producer)

    def held_events(self, pending: Any) -> list[Event]:
        assert isinstance(pending, PendingCompletion)
        return list(pending.feedback)


def _earliest(events: Sequence[Event]) -> int | None:
    return encode_time(min(e.event_time for e in events)) if events else None
