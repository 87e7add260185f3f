"""The telemetry of one decided request: its offer, outcome, edits and any test run it starts.

Times are simulated epoch milliseconds and respect causality within a session: a test run that
starts at a request finishes after it; the offer comes ``latency_ms`` after the request; the
outcome ``decision_ms`` after the offer; edits after the acceptance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.context import CONTEXT_SPEC
from schemas.enums import Decision, Outcome, SuggestionTrigger
from schemas.events import (
    EditObserved,
    Event,
    SuggestionOffered,
    SuggestionOutcome,
    TestRunCompleted,
)
from simulator.code_text import CodeTextSource
from simulator.ground_truth import OutcomeCode
from simulator.ids import IdSource
from simulator.population import Population
from simulator.session import SessionPlan
from simulator.statistical_rollouts import epoch_ms_to_datetime

TimedEvent = tuple[int, Event]  # (event time in epoch ms, event)


@dataclass
class ActiveSession:
    """A session being played: its plan, the next request, and code not yet covered by tests."""

    plan: SessionPlan
    cursor: int = 0
    # (acceptance time ms, suggestion id, breaks a test) of accepted suggestions since the
    # session's last test run, in acceptance order.
    untested: list[tuple[int, str, bool]] = field(default_factory=list)


@dataclass(frozen=True)
class Served:
    """How a request was served: the policy's identity and its logged decision."""

    model_name: str
    model_version: int
    shown: bool
    propensity: float


class RequestEventBuilder:
    """Builds the events of decided requests for one fleet (one producer, one id stream)."""

    def __init__(
        self, producer: str, ids: IdSource, texts: CodeTextSource, population: Population
    ) -> None:
        self._producer = producer
        self._ids = ids
        self._texts = texts
        self._population = population

    def build(
        self, active: ActiveSession, i: int, served: Served, out: list[TimedEvent]
    ) -> tuple[str, OutcomeCode]:
        """Append request ``i`` of ``active``'s events to ``out``; return its suggestion id and
        what became of it. Test runs attribute the suggestions accepted before they start."""
        plan = active.plan
        t = plan.times_ms[i]
        if plan.tests.runs[i]:
            out.append(self._test_run(active, i, t))
        suggestion_id = self._ids.next()
        offer_ms = t + plan.latency_ms[i]
        out.append((offer_ms, self._offer(plan, i, suggestion_id, offer_ms, served)))
        if not served.shown:
            return suggestion_id, OutcomeCode.SUPPRESSED
        o = plan.outcomes
        decided_ms = offer_ms + o.decision_ms[i]
        if not o.accepts[i]:
            if o.ignored[i]:
                return suggestion_id, OutcomeCode.IGNORED
            out.append((decided_ms, self._outcome(plan, suggestion_id, decided_ms, 0, i)))
            return suggestion_id, OutcomeCode.REJECTED
        out.append(
            (decided_ms, self._outcome(plan, suggestion_id, decided_ms, o.accepted_chars[i], i))
        )
        active.untested.append((decided_ms, suggestion_id, o.defect[i]))
        self._edits(plan, i, suggestion_id, decided_ms, out)
        return suggestion_id, OutcomeCode.PARTIAL if o.partial[i] else OutcomeCode.ACCEPTED

    def _offer(
        self, plan: SessionPlan, i: int, suggestion_id: str, offer_ms: int, served: Served
    ) -> SuggestionOffered:
        user = plan.user
        privacy = bool(self._population.privacy_mode[user])
        text = self._texts.text(plan.language, plan.text_u[i], plan.chars[i], plan.secrets[i])
        return SuggestionOffered(
            event_id=self._ids.next(),
            event_time=epoch_ms_to_datetime(offer_ms),
            producer=self._producer,
            suggestion_id=suggestion_id,
            request_id=self._ids.next(),
            session_id=plan.session_id,
            user_id=self._population.user_ids[user],
            repo_id=self._population.repo_ids[plan.repo],
            language=plan.language,
            ide=self._population.ide[user],
            trigger=SuggestionTrigger.INVOKED if plan.invoked[i] else SuggestionTrigger.AUTOMATIC,
            model_name=served.model_name,
            model_version=served.model_version,
            decision=Decision.SHOWN if served.shown else Decision.SUPPRESSED,
            propensity=served.propensity,
            context=plan.context_rows[i],
            context_spec=CONTEXT_SPEC,
            suggestion_chars=len(text),
            suggestion_lines=text.count("\n") + 1,
            latency_ms=plan.latency_ms[i],
            privacy_mode=privacy,
            suggestion_text=None if privacy else text,
        )

    def _outcome(
        self, plan: SessionPlan, suggestion_id: str, decided_ms: int, accepted: int, i: int
    ) -> SuggestionOutcome:
        if accepted == 0:
            outcome = Outcome.REJECTED
        else:
            outcome = Outcome.PARTIAL if plan.outcomes.partial[i] else Outcome.ACCEPTED
        return SuggestionOutcome(
            event_id=self._ids.next(),
            event_time=epoch_ms_to_datetime(decided_ms),
            producer=self._producer,
            suggestion_id=suggestion_id,
            session_id=plan.session_id,
            outcome=outcome,
            accepted_chars=accepted,
            time_to_decision_ms=plan.outcomes.decision_ms[i],
        )

    def _edits(
        self, plan: SessionPlan, i: int, suggestion_id: str, accepted_ms: int, out: list[TimedEvent]
    ) -> None:
        e = plan.edits
        before = plan.outcomes.accepted_chars[i]
        for k in range(e.count[i]):
            offset, retained = e.offset_ms[i][k], e.retained[i][k]
            event = EditObserved(
                event_id=self._ids.next(),
                event_time=epoch_ms_to_datetime(accepted_ms + offset),
                producer=self._producer,
                session_id=plan.session_id,
                suggestion_id=suggestion_id,
                chars_inserted=e.inserted[i][k],
                chars_deleted=before - retained,
                accepted_chars_retained=retained,
                elapsed_since_acceptance_ms=offset,
            )
            out.append((accepted_ms + offset, event))
            before = retained

    def _test_run(self, active: ActiveSession, i: int, start_ms: int) -> TimedEvent:
        plan, draws = active.plan, active.plan.tests
        covered = [item for item in active.untested if item[0] <= start_ms]
        active.untested = [item for item in active.untested if item[0] > start_ms]
        total = int(self._population.repo_tests[plan.repo])
        errored = min(draws.errored[i], total)
        defects = sum(1 for item in covered if item[2])
        failed = min(draws.baseline_failed[i] + defects, total - errored)
        finish_ms = start_ms + draws.duration_ms[i]
        event = TestRunCompleted(
            event_id=self._ids.next(),
            event_time=epoch_ms_to_datetime(finish_ms),
            producer=self._producer,
            session_id=plan.session_id,
            run_id=self._ids.next(),
            tests_passed=total - failed - errored,
            tests_failed=failed,
            tests_errored=errored,
            duration_ms=draws.duration_ms[i],
            suggestion_ids=tuple(item[1] for item in covered),
        )
        return finish_ms, event
