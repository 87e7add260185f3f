"""`flywheel demo`: the whole loop on one machine, until enough model versions are decided.

    simulated fleet ──SDK──► telemetry ──► joiner ──► rewards ──► lake sink ──► lake
          ▲                                             └──► feature processor
          └── subscriber ◄── models.channels ◄── learner ◄──────────────────────┘

The fleet and its serving subscriber run in this process (the fleet must follow the models);
the joiner, sink, feature processor and learner are real `flywheel` commands in subprocesses.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from environments import ENVIRONMENTS, REPOSITORY
from fleet.subscriber import ModelSubscriber
from flywheel.clients import codec, pseudonymizer, telemetry_client
from flywheel.console import err
from flywheel.demo.agent import (
    EPISODE_LIMITS,
    TRIAL_SAMPLING,
    agent_specs,
    agent_version_results,
    online_rewards,
    warm_up_spec,
)
from flywheel.demo.agent_showcase import SHOWCASE_RESERVE_S, showcase
from flywheel.demo.fleet_driver import FleetDriver
from flywheel.demo.measure import LiveVersions, Timeline, version_results
from flywheel.demo.results import RunResults
from flywheel.demo.workers import Workers, WorkerSpec
from flywheel.listen import free_port
from flywheel.settings import Settings
from learner.recipes.agent_rl.windows import SERVED
from learner.recipes.gate.config import LearnerConfig
from learner.recipes.gate.features import OnlineFeatureProvider
from model_registry.registry import DECIDED, ModelRegistry, VersionState
from policies.gate_net import FeatureProvider, load_policy
from policies.policy import Policy
from schemas.enums import ModelEventType
from schemas.records import decode_time
from simulator import Fleet, build_policy, config_with_overrides, load_config
from streams.client import CLIENT_TOPICS
from streams.errors import DecodeError
from streams.lag import LagProbe, start_group_at_end
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC, ROLLOUTS_TOPIC, SUGGESTIONS_TOPIC, TELEMETRY_TOPICS

SINK_GROUP = "flywheel.lake-sink"
JOINER_INPUTS = (*TELEMETRY_TOPICS, ROLLOUTS_TOPIC)
_POLL_S = 1.0
_SLOW_POLL_S = 5.0  # registry reads and lag probes
_TIMELINE_S = 10.0
# Per-topic watermarks keep a topic that runs ahead from making another late, so the joiner
# needs little lateness. The fleet's clock starts an hour after the newest offer in Kafka: every
# topic's watermark of an earlier run (outcomes, edits, tests trail their offers by minutes)
# stays behind the new run's first events.
JOINER_LATENESS_S = 60
# The simulated agent users react within seconds of a completion: a short feedback window gets
# their rewards to the learner sooner (the production default is 5 minutes).
FEEDBACK_WINDOW_S = 20
FLEET_START_MARGIN = timedelta(hours=1)


@dataclass(frozen=True)
class DemoOptions:
    config_path: Path  # simulator config
    versions: int  # stop once this many versions are decided
    budget_s: float  # ... or after this long
    rate_per_s: float  # simulated requests per second
    model_name: str
    run_id: str
    learner_args: tuple[str, ...] = ()  # extra `flywheel learn` options
    learner_config: Path | None = None  # `flywheel learn --config`; None: the default recipe
    loop: str = "tab"  # tab, agent or both
    agent_model: str = "agent-lm"
    agent_versions: int = 10  # agent versions decided (the warm-up's v1 included)
    agent_env: str = REPOSITORY  # the agent loop's environment

    @property
    def tab(self) -> bool:
        return self.loop in ("tab", "both")

    @property
    def agent(self) -> bool:
        return self.loop in ("agent", "both")


@dataclass(frozen=True)
class DemoStatus:
    """What the live display shows."""

    elapsed_s: float
    requests: int
    events_per_s: float
    joiner_lag: int | None
    sink_lag: int | None
    production: int
    canary: int | None
    decided: int
    last_decision: str
    agent: str = ""  # the agent loop's state, when it runs


def newest_event_time(
    kafka_config: Mapping[str, Any], codec: AvroCodec, topic: str, timeout_s: float = 10.0
) -> datetime | None:
    """Event time of the last record of each partition of ``topic``, the latest of them."""
    consumer = Consumer({**kafka_config, "group.id": "_flywheel.demo", "enable.auto.commit": False})
    try:
        newest: datetime | None = None
        partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high <= 0:
                continue
            consumer.assign([TopicPartition(topic, p, high - 1)])
            msg = consumer.poll(timeout_s)
            value = None if msg is None or msg.error() else msg.value()
            if value is None:
                continue
            with contextlib.suppress(DecodeError):
                t = decode_time(codec.decode(topic, value)["event_time"])
                newest = t if newest is None else max(newest, t)
        return newest
    finally:
        consumer.close()


def fleet_start_time(newest: datetime | None, now: datetime, margin: timedelta) -> datetime:
    """Now, or ``margin`` after the newest telemetry already in Kafka if that is later.

    The joiner's watermark survives restarts: a fleet starting behind an earlier run's simulated
    clock (which runs faster than the wall clock) would have all its events judged late.
    """
    return now if newest is None else max(now, newest + margin)


def joiner_group(options: DemoOptions) -> str:
    """The run's own joiner (faust app id and consumer group): its state and watermarks start
    empty and its offsets at the run's start, whatever earlier runs and tests left behind."""
    return f"demo-{options.run_id}.joiner"


def worker_specs(options: DemoOptions) -> list[WorkerSpec]:
    """The workers started with the run: joiner and sink for either loop, the features and
    the gate learner for the tab loop, the agent's warm-up for the agent loop."""
    shared = [
        WorkerSpec(
            "joiner",
            [
                "process",
                "--status-every",
                "10s",
                "--allowed-lateness",
                f"{JOINER_LATENESS_S}s",
                "--group",
                joiner_group(options),
                "--feedback-window",
                f"{FEEDBACK_WINDOW_S}s",
            ],
        ),
        WorkerSpec("sink", ["sink", "--max-age", "2s", "--status-every", "10s"]),
    ]
    agent = [warm_up_spec(options.agent_model, options.agent_env)] if options.agent else []
    return [*shared, *(_tab_specs(options) if options.tab else []), *agent]


def _tab_specs(options: DemoOptions) -> list[WorkerSpec]:
    return [
        # Online features from the rewards, as FeatureUpdates (into the lake through the sink).
        WorkerSpec("features", ["features", "run", "--status-every", "10s"]),
        WorkerSpec(
            "learner",
            [
                "learn",
                "--model",
                options.model_name,
                "--max-versions",
                str(options.versions),
                *(("--config", str(options.learner_config)) if options.learner_config else ()),
                *options.learner_args,
            ],
            finishes=True,
        ),
    ]


class Demo:
    """One run of the closed loop; :meth:`run` returns its results (also on Ctrl-C)."""

    def __init__(self, settings: Settings, options: DemoOptions) -> None:
        self.settings, self.options = settings, options
        self.run_dir = settings.home / "demo" / options.run_id
        self.started = time.time()
        self._registry = ModelRegistry(settings.kafka_client_config(), codec(settings))
        self._states: dict[int, VersionState] = {}

    def _fleet(self) -> Fleet:
        s = self.settings
        newest = newest_event_time(s.kafka_client_config(), codec(s), SUGGESTIONS_TOPIC)
        start = fleet_start_time(newest, datetime.now(UTC), FLEET_START_MARGIN)
        config = config_with_overrides(
            load_config(self.options.config_path),
            {
                "sessions.start_time": start.isoformat(),
                "fleet_id": f"demo-{self.options.run_id}",
                "policy.model_name": self.options.model_name,
            },
        )
        return Fleet(config, build_policy(config.policy))

    def run(self, show: Callable[[DemoStatus], None], stop: threading.Event) -> RunResults:
        s, o = self.settings, self.options
        fleet = self._fleet()
        features_stop = threading.Event()
        provider = self._feature_provider(features_stop)
        subscriber: ModelSubscriber[Policy] = ModelSubscriber(
            s.kafka_client_config(),
            codec(s),
            o.model_name,
            f"demo-fleet-{o.run_id}",
            lambda path, version: load_policy(path, o.model_name, version, features=provider),
            fleet.policy,
        )
        live = LiveVersions(subscriber.route)
        workers = Workers(self.run_dir / "logs")
        timeline = Timeline(self.started)
        probe = LagProbe(s.kafka_client_config())
        results = RunResults(
            o.run_id, o.model_name, datetime.now(UTC).isoformat(), str(o.config_path),
            loop=o.loop, agent_model=o.agent_model if o.agent else None,
        )  # fmt: skip
        client = telemetry_client(s, name=f"demo-{o.run_id}")
        driver = FleetDriver(fleet, client, o.rate_per_s, live)
        try:
            start_group_at_end(s.kafka_client_config(), joiner_group(o), JOINER_INPUTS)
            for spec in worker_specs(o):
                workers.start(spec)
            if o.tab:
                subscriber.start()
                driver.start()
            self._watch(driver, workers, subscriber, probe, timeline, show, stop)
        finally:
            driver.stop()
            features_stop.set()
            client.close()
            workers.stop()
            subscriber.stop()
            probe.close()
            results.elapsed_s = time.time() - self.started
            timeline.sample(fleet.ground_truth.by_version(), time.time())
            self._states = self._read_states()
            results.timeline = timeline.points
            if o.tab:
                results.versions = version_results(
                    fleet.ground_truth.by_version(), self._states, live.first_served, self.started
                )
            if o.agent:
                states = self._agent_states()
                results.agent_versions = agent_version_results(
                    states, online_rewards(s.lake_store(), o.agent_model),
                    online_rewards(s.lake_store(), o.agent_model, SERVED), self.started,
                )  # fmt: skip
                results.agent_env = o.agent_env
                results.agent_extra_eval = ENVIRONMENTS.get_any(o.agent_env).extra_eval
                if not stop.is_set():  # Ctrl-C: the results so far, without the extra minute
                    results.agent_pass_at_k, results.agent_episode = showcase(
                        states,
                        o.agent_env,
                        TRIAL_SAMPLING[o.agent_env],
                        EPISODE_LIMITS,
                        lambda line: err.print(line, highlight=False),
                    )
            results.save(self.run_dir, s.lake_store())
        return results

    def _feature_provider(self, stop: threading.Event) -> FeatureProvider | None:
        """With a learner config that lists features: an online store fed by an in-process
        feature processor thread (replaying ``rewards`` from the beginning, as the lake the
        learner trains on holds every reward), and the serving provider over it; else None."""
        path = self.options.learner_config
        features = LearnerConfig.load(path).features if path is not None else ()
        if not features:
            return None
        from feature_store import OnlineFeatureStore, load_features
        from feature_store.processor import FeatureProcessor

        s = self.settings
        store = OnlineFeatureStore(load_features())
        processor = FeatureProcessor(
            s.kafka_client_config(),
            codec(s),
            store,
            topics={REWARDS_TOPIC: REWARDS_TOPIC},
            producer_name=f"demo-{self.options.run_id}/features",
        )
        thread = threading.Thread(
            target=processor.run, args=(stop.is_set,), name="demo-features", daemon=True
        )
        thread.start()
        keys = pseudonymizer(s)  # the SDK's: rewards carry these pseudonyms
        return OnlineFeatureProvider(store, features, lambda raw: keys.pseudonym("user", raw))

    def _read_states(self) -> dict[int, VersionState]:
        return self._registry.versions(self.options.model_name)

    def _agent_states(self) -> dict[int, VersionState]:
        return self._registry.versions(self.options.agent_model)

    def _watch(
        self,
        driver: FleetDriver,
        workers: Workers,
        subscriber: ModelSubscriber[Policy],
        probe: LagProbe,
        timeline: Timeline,
        show: Callable[[DemoStatus], None],
        stop: threading.Event,
    ) -> None:
        o = self.options
        lags: tuple[int | None, int | None] = (None, None)
        next_slow = next_sample = 0.0
        agent_started, agent_states = False, {}
        while not stop.wait(_POLL_S):
            now = time.time()
            finished = workers.check()
            driver.check()
            if o.agent and not agent_started and "agent-sft" in finished:
                port = free_port()
                for spec in agent_specs(o.agent_model, o.agent_versions, o.run_id, port,
                                        o.agent_env):  # fmt: skip
                    workers.start(spec)  # the warm-up registered v1: RL starts from it
                agent_started = True
            if now >= next_slow:
                next_slow = now + _SLOW_POLL_S
                self._states = self._read_states() if o.tab else {}
                agent_states = self._agent_states() if o.agent else {}
                lags = (
                    probe.lag(joiner_group(o), CLIENT_TOPICS),
                    probe.lag(SINK_GROUP, CLIENT_TOPICS),
                )
            if now >= next_sample:
                next_sample = now + _TIMELINE_S
                timeline.sample(driver.fleet.ground_truth.by_version(), now)
            decided = [v for v in self._states.values() if v.status in DECIDED]
            snapshot = subscriber.snapshot
            last = max(self._states.values(), key=lambda v: v.updated_at, default=None)
            progress = driver.progress()
            show(
                DemoStatus(
                    elapsed_s=now - self.started,
                    requests=progress.requests,
                    events_per_s=progress.events_per_s,
                    joiner_lag=lags[0],
                    sink_lag=lags[1],
                    production=subscriber.serving_version,
                    canary=snapshot.canary.version if snapshot.canary else None,
                    decided=len(decided),
                    last_decision=f"v{last.version} {last.status.name}" if last else "none yet",
                    agent=_agent_line(agent_states, o) if o.agent else "",
                )
            )
            agent_decided = sum(v.status in DECIDED for v in agent_states.values())
            tab_done = not o.tab or "learner" in finished or len(decided) >= o.versions
            if o.tab and o.agent and tab_done and not driver.stopped:
                driver.stop()  # the gate loop is done: its fleet's CPU goes to the agent loop
            agent_done = (not o.agent or "agent-learner" in finished
                          or agent_decided >= o.agent_versions)  # fmt: skip
            # The agent's showcase (pass@k before/after, a worked episode) runs after the loop,
            # inside the budget.
            reserve = SHOWCASE_RESERVE_S if o.agent else 0.0
            if (tab_done and agent_done) or now - self.started >= o.budget_s - reserve:
                return


def _agent_line(states: Mapping[int, VersionState], o: DemoOptions) -> str:
    """The agent loop's part of the status line."""
    if not states:
        return "agent: warming up v1"
    production = [v for v in states.values() if v.status is ModelEventType.PROMOTED]
    best = max(production, key=lambda v: v.version, default=None)
    decided = sum(v.status in DECIDED for v in states.values())
    last = max(states.values(), key=lambda v: v.updated_at)
    pass_at_1 = best.latest.metrics.get("eval_pass_at_1") if best is not None else None
    shown = "?" if pass_at_1 is None else f"{pass_at_1:.1%}"
    where = f"v{best.version} pass@1 {shown}" if best is not None else "none"
    return (f"agent: production {where}, decided {decided}/{o.agent_versions}, "
            f"last v{last.version} {last.status.name}")  # fmt: skip
