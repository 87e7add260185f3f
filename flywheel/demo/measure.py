"""What the demo measures while it runs: when versions go live, and the per-version timeline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from fleet.subscriber import Routed
from flywheel.demo.results import TimelinePoint, VersionResult
from learner.continuous import WINDOW_LAST_EVENT_METRIC
from learner.recipes.gate.off_policy_check import VALUE_LOWER_METRIC, VALUE_UPPER_METRIC
from model_registry.registry import DECIDED, VersionState
from policies.policy import Policy
from schemas.enums import ModelEventType
from simulator.ground_truth import GroundTruthSummary


class LiveVersions:
    """Wraps the subscriber's router and notes when each version first served a request."""

    def __init__(self, route: Callable[[str], Routed[Policy]]) -> None:
        self._route = route
        self._lock = threading.Lock()
        self.first_served: dict[int, float] = {}  # version → wall clock (epoch s)

    def __call__(self, user_id: str) -> Policy:
        routed = self._route(user_id)
        if routed.version not in self.first_served:
            with self._lock:
                self.first_served.setdefault(routed.version, time.time())
        return routed.model


class Timeline:
    """Samples the fleet's per-version ground truth and keeps the deltas per interval."""

    def __init__(self, started: float) -> None:
        self._started = started
        self._last: dict[int, GroundTruthSummary] = {}
        self.points: list[TimelinePoint] = []

    def sample(self, by_version: Mapping[int, GroundTruthSummary], now: float) -> None:
        for version, total in by_version.items():
            before = self._last.get(version, GroundTruthSummary())
            if total.requests > before.requests:
                self.points.append(
                    TimelinePoint(
                        t_s=now - self._started,
                        version=version,
                        requests=total.requests - before.requests,
                        shown=total.shown - before.shown,
                        accepted=total.accepted - before.accepted,
                        reward_sum=total.reward_sum - before.reward_sum,
                    )
                )
        self._last = dict(by_version)


def _check_numbers(state: VersionState) -> tuple[float | None, ...]:
    """(estimate, paired lower bound, production's value, interval low, interval high)."""
    checked = [
        e
        for e in state.events
        if e.event_type in (ModelEventType.GATE_PASSED, ModelEventType.GATE_FAILED)
    ]
    if not checked:
        return None, None, None, None, None
    e = checked[-1]
    low, high = e.metrics.get(VALUE_LOWER_METRIC), e.metrics.get(VALUE_UPPER_METRIC)
    return e.ope_dr_value, e.ope_dr_lower, e.ope_baseline_value, low, high


def version_results(
    truth: Mapping[int, GroundTruthSummary],
    states: Mapping[int, VersionState],
    first_served: Mapping[int, float],
    started: float,
) -> list[VersionResult]:
    """The result table: v0 (the heuristic) and every registered version, in version order."""
    rows = []
    for version in sorted({0, *states}):
        t = truth.get(version, GroundTruthSummary())
        state = states.get(version)
        estimate = lower = baseline = low = high = None
        decision, reason, parent = "SERVING", None, None
        live_s = decided_s = None
        if state is not None:
            estimate, lower, baseline, low, high = _check_numbers(state)
            decision, reason = state.status.name, state.latest.reason
            # A model's first version has no registered parent: it replaced the heuristic v0.
            parent = 0 if state.parent_version is None else state.parent_version
            if state.status in DECIDED:
                decided_s = state.updated_at.timestamp() - started
            last_ms = state.events[0].metrics.get(WINDOW_LAST_EVENT_METRIC)
            if last_ms is not None and version in first_served:
                live_s = first_served[version] - last_ms / 1000.0
        rows.append(
            VersionResult(
                version=version,
                parent_version=parent,
                requests=t.requests,
                shown_per_1000=t.shown_per_1000,
                accept_rate=t.accept_rate,
                reward_per_request=t.reward_per_request,
                gate_estimate=estimate,
                gate_lower=lower,
                gate_baseline=baseline,
                decision=decision,
                reason=reason,
                data_to_live_s=live_s,
                decided_at_s=decided_s,
                gate_interval_low=low,
                gate_interval_high=high,
            )
        )
    return rows
