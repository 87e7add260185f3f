"""The simulated IDE fleet: sessions interleaved in event time, decided by a swappable policy.

``concurrent_sessions`` slots each play one session after another; a heap merges the slots'
requests in event-time order (this is how the fleet simulates concurrent clients: interleaved in
one thread, deterministic, no locks). Requests are decided in batches by ``fleet.policy``; their
events go to a pending heap keyed by (event time, creation order) and leave it once no later
request can produce an earlier event. So the whole stream (not only each session) comes out in
event-time order, identical for the same seed and policy whatever the batch sizes.

Assign ``fleet.policy`` between batches to follow new model versions, or ``fleet.router``
(user id → policy) to split users between versions, as a canary does.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import numpy as np

from policies.policy import Policy, RequestBatch
from schemas.enums import SuggestionTrigger
from schemas.events import Event
from schemas.records import encode_time
from simulator.code_text import CodeTextSource
from simulator.config import SimulatorConfig, parse_start_time
from simulator.errors import SimulatorError
from simulator.ground_truth import GroundTruthLog
from simulator.hidden_model import HiddenModel
from simulator.ids import IdSource, namespace_of
from simulator.policy import decide
from simulator.population import Population, draw_population
from simulator.request_events import ActiveSession, RequestEventBuilder, Served, TimedEvent
from simulator.session import SessionPlan, draw_session
from simulator.statistical_rollouts import StatisticalRolloutGenerator

# Generator streams under the seed: default_rng([seed, stream]); sessions use stream 1.
_POPULATION_STREAM, _ROLLOUT_STREAM, _ID_STREAM = 0, 2, 3


class Fleet:
    """Generates the telemetry of ``config``'s fleet, deterministically from ``config.seed``."""

    def __init__(
        self, config: SimulatorConfig, policy: Policy, *, keep_requests: int = 100_000
    ) -> None:
        """``keep_requests``: per-request ground-truth rows to keep (totals are always kept)."""
        self.config = config
        self.policy = policy
        # user id → policy (canary routing); None serves every request with `policy`.
        self.router: Callable[[str], Policy] | None = None
        self.producer = f"simulator/{config.fleet_id}"
        self.hidden_model = HiddenModel(config.hidden_model)
        rng = np.random.default_rng([config.seed, _POPULATION_STREAM])
        self.population: Population = draw_population(
            rng, config.users, config.tests, self.hidden_model
        )
        self.ground_truth = GroundTruthLog(keep_requests)
        texts = CodeTextSource(config.users.languages, config.suggestions.max_chars)
        # Ids are namespaced by the fleet id too: two runs with one seed but different fleet ids
        # (the CLI draws a fresh one per run) never share an event, session or suggestion id.
        namespace = namespace_of(config.fleet_id)
        ids = IdSource(np.random.default_rng([config.seed, _ID_STREAM, namespace]))
        self._builder = RequestEventBuilder(self.producer, ids, texts, self.population)
        self._rollouts = StatisticalRolloutGenerator(
            config.rollouts,
            np.random.default_rng([config.seed, _ROLLOUT_STREAM, namespace]),
            self.producer,
        )
        self._pending: list[tuple[int, int, Event]] = []  # heap of (time ms, seq, event)
        self._seq = 0
        self._sessions_started = 0
        self.requests_done = 0
        start = parse_start_time(config.sessions.start_time) or datetime.now(UTC)
        start_ms = encode_time(start)  # exact epoch ms, no float rounding
        # Stagger the slots' first sessions over one think time, as clients arrive one by one.
        think_ms = config.sessions.mean_seconds_between_requests * 1e3
        offsets = rng.uniform(0, think_ms, config.sessions.concurrent_sessions)
        self._active: list[ActiveSession] = []
        self._slots: list[tuple[int, int]] = []  # heap of (next request time ms, slot)
        for slot, offset in enumerate(np.rint(offsets).astype(np.int64).tolist()):
            self._active.append(ActiveSession(self._new_session(start_ms + offset)))
            self._slots.append((start_ms + offset, slot))
        heapq.heapify(self._slots)

    def _new_session(self, start_ms: int) -> SessionPlan:
        plan = draw_session(
            self._sessions_started, start_ms, self.config, self.population, self.hidden_model
        )
        self._sessions_started += 1
        return plan

    def _next_requests(self, n: int) -> list[tuple[ActiveSession, int]]:
        """The next ``n`` requests over all slots, in request-time order."""
        slots, out = self._slots, []
        for _ in range(n):
            _, slot = slots[0]
            active = self._active[slot]
            out.append((active, active.cursor))
            active.cursor += 1
            plan = active.plan
            if active.cursor < len(plan):
                heapq.heapreplace(slots, (plan.times_ms[active.cursor], slot))
            else:
                start_ms = plan.times_ms[-1] + plan.idle_after_ms + 1
                self._active[slot] = ActiveSession(self._new_session(start_ms))
                heapq.heapreplace(slots, (start_ms, slot))
        return out

    def step(self, n_requests: int) -> list[Event]:
        """Simulate the next ``n_requests`` requests with the current policy.

        Returns the events that are now final, in event-time order: those no later request can
        precede. The rest (outcomes, edits, test runs still in the simulated future) come out of
        later steps or :meth:`flush`. Raises :class:`SimulatorError` for ``n_requests`` < 1 or
        a policy that returns invalid probabilities.
        """
        if n_requests < 1:
            raise SimulatorError(f"step needs n_requests ≥ 1, got {n_requests}.")
        requests = self._next_requests(n_requests)
        served = self._serve(requests)
        out: list[TimedEvent] = []
        ids: list[str] = []
        codes = np.empty(n_requests, dtype=np.int8)
        secrets = 0
        for j, (active, i) in enumerate(requests):
            suggestion_id, codes[j] = self._builder.build(active, i, served[j], out)
            ids.append(suggestion_id)
            secrets += active.plan.secrets[i] is not None
            if active.plan.rollout_trigger[i]:
                out.extend(self._rollouts.group(active.plan.times_ms[i]))
        p_accept = np.array([a.plan.p_accept[i] for a, i in requests])
        versions = np.array([s.model_version for s in served], dtype=np.int64)
        propensity = np.array([s.propensity for s in served])
        self.ground_truth.record(ids, versions, p_accept, propensity, codes, secrets)
        self.requests_done += n_requests
        for time_ms, event in out:
            heapq.heappush(self._pending, (time_ms, self._seq, event))
            self._seq += 1
        last = requests[-1]
        # Every later request is at ≥ this time and its events at least 1 ms after it.
        return self._pop_until(last[0].plan.times_ms[last[1]])

    def _serve(self, requests: list[tuple[ActiveSession, int]]) -> list[Served]:
        """Decide each request with its user's policy: ``router`` when set, else ``policy``.

        Requests routed to the same policy object are decided as one batch, so a canary split
        costs one extra policy call per batch, not one per request.
        """
        router, default = self.router, self.policy  # fixed for the batch, even if reassigned
        if router is None:
            chosen = [default] * len(requests)
        else:
            user_ids = self.population.user_ids
            chosen = [router(user_ids[a.plan.user]) for a, _ in requests]
        groups: dict[int, list[int]] = {}
        for j, policy in enumerate(chosen):
            groups.setdefault(id(policy), []).append(j)
        served: list[Served | None] = [None] * len(requests)
        for members in groups.values():
            policy = chosen[members[0]]
            shown, propensity = self._decide(policy, [requests[j] for j in members])
            for j, show, p in zip(members, shown, propensity, strict=True):
                served[j] = Served(policy.name, policy.version, show, p)
        return [s for s in served if s is not None]

    def _decide(
        self, policy: Policy, requests: list[tuple[ActiveSession, int]]
    ) -> tuple[list[bool], list[float]]:
        plans = [(a.plan, i) for a, i in requests]
        batch = RequestBatch(
            contexts=np.stack([plan.contexts[i] for plan, i in plans]),
            languages=tuple(plan.language for plan, _ in plans),
            ides=tuple(self.population.ide[plan.user] for plan, _ in plans),
            triggers=tuple(
                SuggestionTrigger.INVOKED if plan.invoked[i] else SuggestionTrigger.AUTOMATIC
                for plan, i in plans
            ),
            user_ids=tuple(self.population.user_ids[plan.user] for plan, _ in plans),
        )
        uniforms = np.array([plan.decision_u[i] for plan, i in plans])
        probabilities = policy.show_probabilities(batch)
        shown, propensity = decide(probabilities, uniforms, self.config.policy.exploration_floor)
        return shown.tolist(), propensity.tolist()

    def _pop_until(self, time_ms: int) -> list[Event]:
        pending, out = self._pending, []
        while pending and pending[0][0] <= time_ms:
            out.append(heapq.heappop(pending)[2])
        return out

    def flush(self) -> list[Event]:
        """Every event still pending, in event-time order: call it when the run ends.

        Events of requests simulated after a flush may be earlier than flushed ones.
        """
        pending, self._pending = self._pending, []
        return [item[2] for item in sorted(pending)]

    def events(self, n_requests: int, batch_size: int = 1024) -> Iterator[Event]:
        """The events of the next ``n_requests`` requests and then every pending event.

        Requests are decided ``batch_size`` at a time; a policy assigned while iterating takes
        over at the next batch.
        """
        remaining = n_requests
        while remaining > 0:
            size = min(batch_size, remaining)
            yield from self.step(size)
            remaining -= size
        yield from self.flush()
