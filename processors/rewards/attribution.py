"""Event-time attribution of telemetry to suggestions, and the Reward events it yields (DESIGN §5).

A suggestion's events (offer, outcome, edits, test runs) arrive on four topics in any order. The
adapter keeps one :class:`PendingSuggestion` per suggestion id, folds each event in with
:func:`add` (pure, idempotent, order-independent), and when the partition's watermark passes
:func:`deadline_ms` it calls :func:`attribute` and :func:`rewards`. Events older than the
watermark minus the allowed lateness (:func:`is_late`) go to ``dlq.late``, never dropped silently.

All windows are event time in milliseconds. Attribution depends only on event times, never on
arrival order, so a replay yields the same rewards with the same reward ids.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Protocol, TypeVar

from processors.rewards.errors import RewardError
from processors.rewards.functions import Attribution, RewardFunction
from schemas.enums import RewardSource
from schemas.errors import SchemaError
from schemas.events import (
    EditObserved,
    Event,
    Reward,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
)
from schemas.records import encode_time, name_uuid

# Namespace of the deterministic reward ids: uuid5(REWARD_NAMESPACE, f"{source_id}:{reward_fn}").
# Never change it: every reward id ever written depends on it.
REWARD_NAMESPACE = uuid.UUID("6f1c2a9e-4b7d-5e3a-9c80-2d4f6a8b1e57")


@dataclass(frozen=True)
class Windows:
    """Attribution windows, in event-time milliseconds.

    An outcome counts within ``outcome_ms`` after the offer, an edit within ``edits_ms`` after
    the outcome, a test run within ``tests_ms`` after the offer. A suggestion is attributed at
    its deadline, offer time + the largest window; an event older than the watermark minus
    ``allowed_lateness_ms`` is late. Raises :class:`RewardError` for a negative value.
    """

    outcome_ms: int = 60_000
    edits_ms: int = 300_000
    tests_ms: int = 600_000
    allowed_lateness_ms: int = 30_000

    def __post_init__(self) -> None:
        check_windows(self, "attribution windows")


def check_windows(windows: Any, what: str) -> None:
    """RewardError naming every negative field of the dataclass ``windows``."""
    negative = {
        f.name: getattr(windows, f.name) for f in fields(windows) if getattr(windows, f.name) < 0
    }
    if negative:
        raise RewardError(f"{what} must be >= 0 ms, got {negative}")


@dataclass(frozen=True)
class PendingSuggestion:
    """Everything seen so far for one suggestion id; any part may still be missing.

    Invariants kept by :func:`add`: ``edits`` and ``tests`` hold each event_id once, sorted by
    (event_time, event_id); of several offers or outcomes the earliest (event_time, event_id)
    wins. So the state depends on the set of events added, not on their order.
    """

    offered: SuggestionOffered | None = None
    outcome: SuggestionOutcome | None = None
    edits: tuple[EditObserved, ...] = ()
    tests: tuple[TestRunCompleted, ...] = ()

    def to_json(self) -> str:
        """Compact JSON of the events as Avro-style records (times as epoch ms), for a table."""
        return json.dumps(
            {
                "offered": None if self.offered is None else self.offered.to_record(),
                "outcome": None if self.outcome is None else self.outcome.to_record(),
                "edits": [e.to_record() for e in self.edits],
                "tests": [t.to_record() for t in self.tests],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> PendingSuggestion:
        """Inverse of :meth:`to_json`. Raises :class:`RewardError` when ``text`` is not one."""
        try:
            data = json.loads(text)
            return cls(
                offered=_optional(SuggestionOffered, data["offered"]),
                outcome=_optional(SuggestionOutcome, data["outcome"]),
                edits=tuple(EditObserved.from_record(e) for e in data["edits"]),
                tests=tuple(TestRunCompleted.from_record(t) for t in data["tests"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError, SchemaError) as exc:
            raise RewardError(
                f"not a PendingSuggestion.to_json() document ({exc}); the stored state is "
                "corrupt or from an incompatible version: clear the table and replay."
            ) from exc


_E = TypeVar("_E", bound=Event)


def _optional(cls: type[_E], record: Any) -> _E | None:
    return None if record is None else cls.from_record(record)


def suggestion_ids_of(event: Event) -> tuple[str, ...]:
    """The suggestion ids ``event`` is attributed to.

    An offer or outcome: its suggestion_id; an edit: its suggestion_id, or () when null; a test
    run: its suggestion_ids (duplicates removed, order kept). Raises :class:`RewardError` for
    any other event type.
    """
    # Tuples, not `A | B`: isinstance with a union type is several times slower, and this
    # runs twice per event the joiner reads.
    if isinstance(event, (SuggestionOffered, SuggestionOutcome)):
        return (event.suggestion_id,)
    if isinstance(event, EditObserved):
        return () if event.suggestion_id is None else (event.suggestion_id,)
    if isinstance(event, TestRunCompleted):
        return tuple(dict.fromkeys(event.suggestion_ids))
    raise RewardError(
        f"{type(event).__name__} is not a suggestion event; attribution takes SuggestionOffered, "
        "SuggestionOutcome, EditObserved and TestRunCompleted."
    )


def _order(event: Event) -> tuple[datetime, str]:
    return event.event_time, event.event_id


def _merge(events: tuple[_E, ...], event: _E) -> tuple[_E, ...]:
    if any(e.event_id == event.event_id for e in events):
        return events
    return tuple(sorted((*events, event), key=_order))


def _earliest(current: _E | None, event: _E) -> _E:
    return event if current is None or _order(event) < _order(current) else current


def _known_suggestion_id(pending: PendingSuggestion) -> str | None:
    """The suggestion id of the events held (the edits held all name it: `add` refuses the
    others); tests name several, so they cannot tell it."""
    for event in (pending.offered, pending.outcome, *pending.edits):
        if event is not None:
            return event.suggestion_id
    return None


def add(pending: PendingSuggestion | None, event: Event) -> PendingSuggestion:
    """``pending`` (None: nothing yet) with ``event`` folded in; ``pending`` is not modified.

    Idempotent by event_id and independent of order (see :class:`PendingSuggestion`). Raises
    :class:`RewardError` when ``event`` is not attributable to a suggestion (another type, an
    edit with no suggestion_id) or belongs to a different suggestion than ``pending``.
    """
    ids = suggestion_ids_of(event)
    if not ids:
        raise RewardError(
            f"{type(event).__name__} {event.event_id} names no suggestion; route only events "
            "with suggestion ids (suggestion_ids_of) to attribution."
        )
    pending = pending or PendingSuggestion()
    known = _known_suggestion_id(pending)
    if known is not None and known not in ids:
        raise RewardError(
            f"{type(event).__name__} {event.event_id} is for suggestion(s) {list(ids)}, not "
            f"{known!r}; key the pending state by suggestion_id."
        )
    if isinstance(event, SuggestionOffered):
        return PendingSuggestion(
            _earliest(pending.offered, event), pending.outcome, pending.edits, pending.tests
        )
    if isinstance(event, SuggestionOutcome):
        return PendingSuggestion(
            pending.offered, _earliest(pending.outcome, event), pending.edits, pending.tests
        )
    if isinstance(event, EditObserved):
        return PendingSuggestion(
            pending.offered, pending.outcome, _merge(pending.edits, event), pending.tests
        )
    if isinstance(event, TestRunCompleted):
        return PendingSuggestion(
            pending.offered, pending.outcome, pending.edits, _merge(pending.tests, event)
        )
    raise RewardError(f"unexpected event type {type(event).__name__}")  # suggestion_ids_of raised


def deadline_ms(pending: PendingSuggestion, windows: Windows) -> int | None:
    """Event time (epoch ms) at which the suggestion is attributed: offer time + the largest
    window. None until the offer is known."""
    if pending.offered is None:
        return None
    longest = max(windows.outcome_ms, windows.edits_ms, windows.tests_ms)
    return encode_time(pending.offered.event_time) + longest


class Lateness(Protocol):
    """Windows with an allowed lateness (suggestion :class:`Windows`, completion feedback's)."""

    @property
    def allowed_lateness_ms(self) -> int: ...


def is_late(event_time_ms: int, watermark_ms: int | None, windows: Lateness) -> bool:
    """True when an event is older than the watermark minus the allowed lateness (→ dlq.late).

    Nothing is late before the watermark exists (``watermark_ms`` None).
    """
    if watermark_ms is None:
        return False
    return event_time_ms < watermark_ms - windows.allowed_lateness_ms


def _within(event: Event, start_ms: int, length_ms: int, end_ms: int) -> bool:
    t = encode_time(event.event_time)
    return start_ms <= t <= min(start_ms + length_ms, end_ms)


def attribute(pending: PendingSuggestion, windows: Windows) -> Attribution:
    """The :class:`Attribution` of a pending suggestion: what falls inside the windows.

    Kept: the outcome if at most ``outcome_ms`` after the offer (else the suggestion counts as
    ignored); edits from the outcome to ``edits_ms`` after it (none without an outcome); test
    runs from the offer to ``tests_ms`` after it. Nothing after the deadline counts, so the
    result is the same whenever the adapter fires. Raises :class:`RewardError` when the offer
    is still unknown (an orphan outcome, edit or test run cannot be rewarded).
    """
    offered = pending.offered
    if offered is None:
        raise RewardError(
            "cannot attribute a suggestion whose SuggestionOffered has not arrived; wait for the "
            "offer (deadline_ms is None until then) or dead-letter the orphan events."
        )
    offer_ms = encode_time(offered.event_time)
    end_ms = offer_ms + max(windows.outcome_ms, windows.edits_ms, windows.tests_ms)
    outcome = pending.outcome
    if outcome is not None and encode_time(outcome.event_time) > offer_ms + windows.outcome_ms:
        outcome = None
    edits: tuple[EditObserved, ...] = ()
    if outcome is not None:
        outcome_ms = encode_time(outcome.event_time)
        edits = tuple(e for e in pending.edits if _within(e, outcome_ms, windows.edits_ms, end_ms))
    tests = tuple(t for t in pending.tests if _within(t, offer_ms, windows.tests_ms, end_ms))
    return Attribution(offered=offered, outcome=outcome, edits=edits, tests=tests)


def reward_id(source_id: str, reward_fn: str) -> str:
    """The deterministic reward id of (source, function): UUIDv5 in :data:`REWARD_NAMESPACE`."""
    return name_uuid(REWARD_NAMESPACE, f"{source_id}:{reward_fn}")


def check_aware(attributed_at: datetime) -> None:
    """Raise :class:`RewardError` for a naive ``attributed_at`` (Avro times need a timezone)."""
    if attributed_at.tzinfo is None or attributed_at.utcoffset() is None:
        raise RewardError(
            f"attributed_at {attributed_at!r} is naive; pass a timezone-aware time, e.g. "
            "datetime.now(UTC)."
        )


def rewards(
    attribution: Attribution,
    functions: Sequence[RewardFunction],
    attributed_at: datetime,
    producer: str,
) -> list[Reward]:
    """One SUGGESTION :class:`Reward` per function, in the order of ``functions``.

    The decision, propensity, context and categorical context are copied from the offer, so a
    learner can train from the reward row alone; ``event_time`` is the offer's, ``reward_id``
    is deterministic (:func:`reward_id`) and ``event_id`` is fresh. Raises
    :class:`RewardError` for a naive ``attributed_at``.
    """
    check_aware(attributed_at)
    offered = attribution.offered
    out = []
    for fn in functions:
        value, components = fn.score(attribution)
        out.append(
            Reward(
                event_time=offered.event_time,
                producer=producer,
                reward_id=reward_id(offered.suggestion_id, fn.id),
                source=RewardSource.SUGGESTION,
                source_id=offered.suggestion_id,
                session_id=offered.session_id,
                group_id=None,
                user_id=offered.user_id,
                repo_id=offered.repo_id,
                model_name=offered.model_name,
                model_version=offered.model_version,
                decision=offered.decision,
                propensity=offered.propensity,
                context=offered.context,
                context_spec=offered.context_spec,
                language=offered.language,
                ide=offered.ide,
                trigger=offered.trigger,
                reward=float(value),
                reward_components=dict(components),
                reward_fn=fn.id,
                advantage=None,
                attributed_at=attributed_at,
            )
        )
    return out


def combined_watermark(
    watermarks: Mapping[str, int], idle: Collection[str] = frozenset()
) -> int | None:
    """The attribution watermark of a partition fed by several inputs (topics).

    Each input has its own watermark (the largest event time it has delivered); an event can
    still arrive on time on the *slowest* input, so the partition is only as far as the minimum.
    Inputs in ``idle`` (no progress for a while: nothing left to read) are left out so they do
    not stall attribution; when every input is idle the largest watermark counts. None when no
    input has a watermark yet.
    """
    if not watermarks:
        return None
    active = [ms for topic, ms in watermarks.items() if topic not in idle]
    return min(active) if active else max(watermarks.values())


class Watermark:
    """An input's event-time watermark: the largest event time seen (epoch ms).

    ``value_ms`` is None before the first event. Not thread-safe; keep one per partition.
    """

    def __init__(self, value_ms: int | None = None) -> None:
        self._value_ms = value_ms

    def observe(self, event_time_ms: int) -> None:
        """Advance to ``event_time_ms`` if it is later; a watermark never goes back."""
        if self._value_ms is None or event_time_ms > self._value_ms:
            self._value_ms = event_time_ms

    @property
    def value_ms(self) -> int | None:
        """The largest event time observed, or None before any."""
        return self._value_ms
