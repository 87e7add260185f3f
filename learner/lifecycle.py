"""What happens to a registered candidate, for every recipe (DESIGN §8, §12):

    REGISTERED → GATE_PASSED | GATE_FAILED → CANARY_STARTED → PROMOTED | ROLLED_BACK

The recipe trains and checks; :class:`VersionLifecycle` records the release check's verdict,
runs the canary on the ``rewards`` stream (the two versions' realised rewards, non-inferiority
with a confidence bound), promotes or rolls back, and settles a version that a crash left undecided.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model_registry.canary import CanaryConfig, CanaryMonitor, CanaryVerdict, canary_decision
from model_registry.registry import DECIDED, ModelRegistry
from schemas.enums import ModelEventType
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC


@dataclass
class LearnerStats:
    """What the learner did since it started (read by ``flywheel.metrics`` at scrape time)."""

    train_rows: int = 0  # rows trained on, over all versions
    decisions: Counter[str] = field(default_factory=Counter)  # ModelEventType name -> count
    # Token windows (learner.recipes.agent_rl.row_admission): rows cut / overlong / greedy, and
    # dead-lettered rows by cause.
    window_rows: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class CycleResult:
    version: int
    decision: ModelEventType
    reason: str


Baseline = Callable[[int], dict[str, float]]  # production version → user → pre-canary mean


class VersionLifecycle:
    """The registry side of a recipe's versions of ``model_name``: its canary compares
    ``source`` Rewards of ``reward_fn`` (SUGGESTION for the gate, ROLLOUT for the agent), with
    bounds clustered by the Reward field ``cluster_by`` (user_id, group_id);
    ``baseline`` (optional) gives per-user covariates for the CUPED adjustment."""

    def __init__(
        self,
        registry: ModelRegistry,
        kafka_config: Mapping[str, Any],
        codec: AvroCodec,
        model_name: str,
        *,
        reward_fn: str,
        source: str,
        cluster_by: str,
        canary: CanaryConfig,
        stats: LearnerStats,
        baseline: Baseline | None = None,
        rewards_topic: str = REWARDS_TOPIC,
        log: Callable[[str], None] = print,
    ) -> None:
        self.registry, self.model_name = registry, model_name
        self._kafka_config, self._codec = dict(kafka_config), codec
        self.reward_fn, self.source, self.config = reward_fn, source, canary
        self.cluster_by = cluster_by
        self.stats, self._baseline, self.log = stats, baseline, log
        self.rewards_topic = rewards_topic

    def run(
        self,
        stop: threading.Event,
        max_versions: int | None,
        next_version: Callable[[], CycleResult | None],
    ) -> list[CycleResult]:
        """A recipe's loop: settle what a crash left, then ``next_version()`` (wait for data,
        train, check, canary; None when ``stop`` was set while waiting) until ``stop`` is set or
        ``max_versions`` versions of the model are decided in total."""
        results: list[CycleResult] = []
        self.finish_interrupted(stop)
        while not stop.is_set():
            decided = self.decided_count()
            if max_versions is not None and decided >= max_versions:
                self.log(f"{decided} versions decided; stopping (--max-versions {max_versions})")
                break
            result = next_version()
            if result is None:
                break
            results.append(result)
        return results

    def decided_count(self) -> int:
        return sum(v.status in DECIDED for v in self.registry.versions(self.model_name).values())

    def trained_windows(self) -> set[str]:
        """MDS windows some version (decided or not) was trained on."""
        return {
            name
            for state in self.registry.versions(self.model_name).values()
            for name in state.events[0].training_window.mds_windows
        }

    def record_check(
        self,
        version: int,
        parent: int | None,
        passed: bool,
        reason: str,
        stop: threading.Event,
        **fields: Any,
    ) -> CycleResult:
        """Record the release check's verdict (``fields``: more ModelVersionEvent fields); a passing
        version goes to canary against ``parent`` (0: the fallback)."""
        kind = ModelEventType.GATE_PASSED if passed else ModelEventType.GATE_FAILED
        self.registry.record_step(self.model_name, version, kind, reason=reason, **fields)
        self.log(f"v{version}: {kind.name} — {reason}")
        self.stats.decisions[kind.name] += 1
        if not passed:
            return CycleResult(version, kind, reason)
        result = self.canary(version, parent or 0, stop)
        self.stats.decisions[result.decision.name] += 1
        return result

    def canary(self, version: int, production: int, stop: threading.Event) -> CycleResult:
        c = self.config
        baseline = self._baseline(production) if self._baseline is not None else {}
        monitor = CanaryMonitor(self._kafka_config, self._codec, self.model_name, self.reward_fn,
                                version, production, source=self.source,
                                topic=self.rewards_topic, cluster_by=self.cluster_by)  # fmt: skip
        self.registry.start_canary(self.model_name, version, c.traffic_fraction)
        self.log(f"v{version}: canary on {c.traffic_fraction:.0%} of traffic vs v{production}")
        deadline = time.monotonic() + c.timeout_s
        try:
            while True:
                monitor.poll(1.0)
                canary_clusters, production_clusters = monitor.clusters()
                verdict = canary_decision(
                    *monitor.rewards(baseline),
                    canary_clusters=canary_clusters,
                    production_clusters=production_clusters,
                    min_requests=c.min_requests,
                    confidence=c.confidence,
                    tolerance=c.tolerance,
                    max_requests=c.max_requests,
                )
                timed_out = time.monotonic() >= deadline or stop.is_set()
                if verdict.verdict is not CanaryVerdict.CONTINUE or timed_out:
                    break
        finally:
            monitor.close()
        adjusted = " (CUPED-adjusted for each arm's users)" if baseline else ""
        if verdict.verdict is CanaryVerdict.PROMOTE:
            why = verdict.reason + adjusted
            self.registry.promote(self.model_name, version, reason=why)
            self.log(f"v{version}: PROMOTED — {why}")
            return CycleResult(version, ModelEventType.PROMOTED, why)
        if verdict.verdict is CanaryVerdict.ROLLBACK:
            why = verdict.reason + adjusted
        elif stop.is_set():
            why = f"the learner stopped during the canary ({verdict.reason}{adjusted})"
        else:
            why = f"no decision within the canary's limits ({verdict.reason}{adjusted})"
        self.registry.stop_canary(self.model_name, reason=why)
        self.log(f"v{version}: ROLLED_BACK — {why}")
        return CycleResult(version, ModelEventType.ROLLED_BACK, why)

    def finish_interrupted(self, stop: threading.Event) -> None:
        """Settle a version a crash left undecided (after REGISTERED, GATE_PASSED or canary)."""
        for state in self.registry.versions(self.model_name).values():
            if state.status is ModelEventType.REGISTERED:
                self.registry.record_step(
                    self.model_name,
                    state.version,
                    ModelEventType.GATE_FAILED,
                    reason="the learner stopped before the check decided; retrained next cycle",
                )
            elif state.status is ModelEventType.CANARY_STARTED:
                self.registry.stop_canary(self.model_name, reason="learner restarted")
            elif state.status is ModelEventType.GATE_PASSED:
                self.canary(state.version, state.parent_version or 0, stop)
