"""The continuous learner: one loop for every recipe that trains versions from the lake (DESIGN §8).

    wait for new windows → train (warm start from production, replay, autoresume)
      → the recipe's release check → artifact + REGISTERED / GATE_* → canary → PROMOTED or
      ROLLED_BACK → repeat

A recipe (learner/recipes/<name>/) says what differs behind the small :class:`Recipe` Protocol:
what production is, how a window is built, what one version trains on and how it is checked,
how its artifact is written. Everything else is here, once. Every step is restartable: windows
are converted exactly once (manifest), a training run resumes from its newest complete checkpoint
(its save directory is named after its newest window), and a version left mid-flight by a crash
is settled from its state in ``models.versions`` (learner.lifecycle).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

import torch

from ground.store import Store
from learner.data.lake_mirror import sync_mirror
from learner.data.replay import StreamsConfig, plan_streams
from learner.data.window_manifest import WindowRecord, read_manifest
from learner.data.window_store import (
    link_into_cache,
    remote_streams,
    streaming_from,
    sync_published,
)
from learner.data.windows import dataset_lock
from learner.engine.checkpoints import load_trained
from learner.engine.loader import WindowStream, concat_rows
from learner.engine.microbatch import Collate, TrainingTask
from learner.engine.trainer import FitResult, Trainer, TrainerConfig
from learner.lifecycle import CycleResult, LearnerStats, VersionLifecycle
from model_registry.artifacts import publish_artifact
from model_registry.canary import CanaryConfig
from model_registry.registry import ModelRegistry
from schemas.events import LakeOffsetRange, TrainingWindow
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC

# ModelVersionEvent.metrics key: the newest attributed Reward (ms) in the version's new windows.
WINDOW_LAST_EVENT_METRIC = "window_last_attributed_ms"

M = TypeVar("M", bound=torch.nn.Module)  # the trained model (GatePolicyNet, an HF causal LM)
P = TypeVar("P", bound="Production")  # what the recipe loaded of production


@dataclass(frozen=True)
class LearnerPaths:
    lake: Path  # the lake on disk, or this learner's mirror of `lake_store`
    mds_root: Path  # mds/<dataset>/ per model
    models_root: Path | Store  # models/<model>/<version>/ artifacts (FLYWHEEL_MODELS)
    runs_root: Path  # training checkpoints, runs/<model>/<last new window>/
    # The lake in an object store, mirrored into `lake` before each build (lake_mirror).
    lake_store: Store | None = None
    # Where windows are published (learner.data.window_store); training then streams every
    # window from there through `windows_cache`, at most `windows_cache_limit` bytes of shards.
    windows: Store | None = None
    windows_cache: Path | None = None
    windows_cache_limit: int | None = None

    def describe(self, dataset: str) -> str:
        """Where the lake and `dataset`'s windows are, for a learner's first log line."""
        lake = f"lake {self.lake}"
        if self.lake_store is not None:
            lake = f"lake {self.lake_store} (mirrored in {self.lake})"
        windows = f"MDS {self.mds_root / dataset}"
        if self.windows is not None:
            windows += f", published to {self.windows}/{dataset} (cache {self.windows_cache})"
        return f"{lake}, {windows}"


@dataclass(frozen=True)
class LoopSettings:
    """What the loop needs of a recipe's config: plain values, fixed for the learner's life."""

    model_name: str
    dataset: str  # MDS dataset under mds_root: the recipe's windows
    reward_fn: str  # the Rewards the windows, the versions and the canary are of
    min_new_rows: int  # rows in windows no version trained on before a cycle starts
    poll_s: float
    waiting_for: str  # what the wait's log line counts ("data", "trials")
    streams: StreamsConfig
    train: TrainerConfig  # save_dir and init_from are set per version
    canary: CanaryConfig
    canary_source: str  # Reward.source the canary compares (SUGGESTION, ROLLOUT)
    cluster_by: str  # Reward field whose equal values are correlated evidence
    # When production is read: before the wait (the agent evaluates it while its trials gather)
    # or once the windows are there (the gate).
    production: Literal["before_wait", "after_wait"]
    # A resumed cycle rewrites the warm start's init.pt (the gate: production may have changed
    # since the crash), or keeps the one it started from (the agent).
    overwrite_warm_start: bool
    # The lake topics the recipe reads (a lake in an object store mirrors them).
    lake_topics: tuple[str, ...] = (REWARDS_TOPIC,)


class Production(Protocol):
    """Production as a recipe loaded it; ``version`` None while nothing is promoted (the gate's
    fallback v0)."""

    @property
    def version(self) -> int | None: ...


@dataclass(frozen=True)
class Trained:
    """How training a version went, for the release check and the version's metrics."""

    fit: FitResult
    train_s: float

    @property
    def loss(self) -> float:
        """The last step's loss (nan when no step ran)."""
        return self.fit.losses[-1] if self.fit.losses else float("nan")


@dataclass(frozen=True)
class Release:
    """A release check's verdict and what the version's ModelVersionEvents carry."""

    passed: bool
    reason: str
    metrics: dict[str, float]  # ModelVersionEvent.metrics, in the recipe's order
    fields: dict[str, Any] = field(
        default_factory=dict
    )  # more event fields (the off-policy check's ope_*)


@dataclass(frozen=True)
class CyclePlan(Generic[M]):
    """One version's training inputs and its release check."""

    task: TrainingTask
    model_factory: Callable[[], M]
    warm_start: torch.nn.Module | None  # its weights become <save_dir>/init.pt
    trained_rows: int  # added to LearnerStats.train_rows once trained
    check: Callable[[M, int, Trained], Release]  # (candidate, its version, training) → verdict
    collate: Collate = concat_rows


class Recipe(Protocol[M, P]):
    """What a continuous recipe supplies to :class:`ContinuousLearner`."""

    @property
    def settings(self) -> LoopSettings: ...

    def production(self, registry: ModelRegistry) -> P:
        """Production as this recipe trains and checks against (loaded once per cycle)."""
        ...

    def build_window(self, production: P | None, stats: LearnerStats) -> None:
        """Turn new lake files into at most one new window (``production``: None when it is
        read after the wait); count what the window refused in ``stats``."""
        ...

    def plan(self, new: Sequence[WindowRecord], production: P) -> CyclePlan[M]:
        """What the version trained on ``new`` (+ replay) starts from and is checked by."""
        ...

    def save(self, model: M, production: P, directory: Path) -> None:
        """Write ``model``'s artifact files into ``directory``."""
        ...

    def canary_baseline(self, production: int) -> dict[str, float]:
        """Per-user covariates for the canary's CUPED adjustment ({}: none)."""
        ...


class ContinuousLearner(Generic[M, P]):
    """Trains, checks and publishes versions of a recipe's model from the lake, one per cycle."""

    def __init__(
        self,
        recipe: Recipe[M, P],
        paths: LearnerPaths,
        kafka_config: Mapping[str, Any],
        codec: AvroCodec,
        *,
        registry: ModelRegistry | None = None,
        rewards_topic: str = REWARDS_TOPIC,
        log: Callable[[str], None] = print,
    ) -> None:
        s = recipe.settings
        self.recipe, self.settings, self.paths, self.log = recipe, s, paths, log
        self.registry = registry or ModelRegistry(
            kafka_config, codec, producer=f"learner/{s.model_name}"
        )
        self.stats = LearnerStats()  # read by flywheel.metrics.LearnerCollector
        self.lifecycle = VersionLifecycle(
            self.registry, kafka_config, codec, s.model_name, reward_fn=s.reward_fn,
            source=s.canary_source, cluster_by=s.cluster_by, canary=s.canary, stats=self.stats,
            baseline=recipe.canary_baseline, rewards_topic=rewards_topic, log=log,
        )  # fmt: skip

    def run(self, stop: threading.Event, max_versions: int | None = None) -> list[CycleResult]:
        """Cycle until ``stop`` is set or ``max_versions`` versions are decided in total."""
        # Adopt what was published, and finish a crashed publish, once before building more.
        self._sync_windows(recover=True)

        def next_version() -> CycleResult | None:
            early = self.settings.production == "before_wait"
            production = self.recipe.production(self.registry) if early else None
            new = self._wait_for_windows(production, stop)
            if not new:
                return None
            if production is None:
                production = self.recipe.production(self.registry)
            return self.cycle(new, production, stop)

        return self.lifecycle.run(stop, max_versions, next_version)

    def _wait_for_windows(self, production: P | None, stop: threading.Event) -> list[WindowRecord]:
        """Build windows from new lake files until untrained windows hold enough rows."""
        s = self.settings
        trained = self.lifecycle.trained_windows()
        last_note = 0.0
        while not stop.is_set():
            self._sync_lake()
            self.recipe.build_window(production, self.stats)
            self._sync_windows()  # publish what was built
            manifest = read_manifest(self.paths.mds_root / s.dataset, s.dataset, s.reward_fn)
            new = [w for w in manifest.windows if w.name not in trained and w.rows > 0]
            rows = sum(w.rows for w in new)
            if rows >= s.min_new_rows:
                return new
            if time.monotonic() - last_note > 30:
                self.log(f"waiting for {s.waiting_for}: {rows:,} of {s.min_new_rows:,} new rows")
                last_note = time.monotonic()
            stop.wait(s.poll_s)
        return []

    def _sync_lake(self) -> None:
        store = self.paths.lake_store
        if store is None:
            return
        done = sync_mirror(store, self.paths.lake, self.settings.lake_topics)
        if done.fetched or done.removed:
            self.log(f"lake mirror: {done.fetched} file(s) fetched ({done.bytes:,} bytes), "
                     f"{done.removed} removed, from {store}")  # fmt: skip

    def _sync_windows(self, *, recover: bool = False) -> None:
        store = self.paths.windows
        if store is None:
            return
        s = self.settings
        root = self.paths.mds_root / s.dataset
        root.mkdir(parents=True, exist_ok=True)
        with dataset_lock(root):
            done = sync_published(store, root, s.dataset, s.reward_fn, recover=recover)
        for what, names in (("adopted", done.adopted), ("published", done.published),
                            ("dropped (gone from the store)", done.dropped)):  # fmt: skip
            if names:
                self.log(f"windows {what}: {', '.join(names)} ({store}/{s.dataset})")

    def cycle(
        self, new: Sequence[WindowRecord], production: P, stop: threading.Event
    ) -> CycleResult:
        """Train on ``new`` windows (+ replay), check, publish, canary; returns the decision."""
        plan = self.recipe.plan(new, production)
        started = time.monotonic()
        model, fit = self._train(new, plan)
        trained = Trained(fit, time.monotonic() - started)
        self.stats.train_rows += plan.trained_rows
        version = self.registry.next_version(self.settings.model_name)
        release = plan.check(model, version, trained)
        self._register(version, production, model, new, release.metrics)
        return self.lifecycle.record_check(
            version, production.version, release.passed, release.reason, stop, **release.fields
        )

    def _train(self, new: Sequence[WindowRecord], plan: CyclePlan[M]) -> tuple[M, FitResult]:
        s = self.settings
        save_dir = self.paths.runs_root / s.model_name / new[-1].name
        init_from = None
        if plan.warm_start is not None:  # production's weights
            save_dir.mkdir(parents=True, exist_ok=True)
            init_from = save_dir / "init.pt"
            if s.overwrite_warm_start or not init_from.exists():
                torch.save(plan.warm_start.state_dict(), init_from)
        streams = plan_streams(
            self.paths.mds_root, s.dataset, s.reward_fn, new_windows=len(new),
            replay_fraction=s.streams.replay_fraction,
            max_replay_windows=s.streams.max_replay_windows,
        )  # fmt: skip
        windows = [self._stream(p.local, p.proportion) for p in streams]
        trainer = Trainer(
            dataclasses.replace(s.train, save_dir=save_dir, init_from=init_from),
            plan.task,
            plan.model_factory,
            windows,
            collate=plan.collate,
            cache_limit=self.paths.windows_cache_limit,
        )
        store = self.paths.windows  # with one, the windows stream from it (`_stream`)
        with streaming_from(store.location) if store is not None else contextlib.nullcontext():
            fit = trainer.fit()
        return load_trained(save_dir, plan.model_factory), fit

    def _stream(self, local: Path, proportion: float | None) -> WindowStream:
        """A window on this disk; with a windows store, every window streams from the store
        through the bounded cache (streaming's eviction deletes shards of any local directory,
        so it never gets the windows built here), a window built here linked into the cache
        first so that it is not downloaded."""
        store, cache = self.paths.windows, self.paths.windows_cache
        if store is None or cache is None:
            return WindowStream(local=local, proportion=proportion)
        stream = remote_streams(store, self.settings.dataset, [local.name], cache, [proportion])[0]
        if (local / "index.json").exists():
            link_into_cache(local, stream.local)
        return stream

    def _register(
        self,
        version: int,
        production: P,
        model: M,
        new: Sequence[WindowRecord],
        metrics: dict[str, float],
    ) -> None:
        s = self.settings
        with tempfile.TemporaryDirectory() as tmp:
            self.recipe.save(model, production, Path(tmp))
            ref = publish_artifact(self.paths.models_root, s.model_name, version, Path(tmp))
        window = TrainingWindow(
            mds_dataset=s.dataset,
            mds_windows=tuple(w.name for w in new),
            lake_ranges=tuple(
                LakeOffsetRange(topic=f.topic, partition=f.partition, first=f.first, last=f.last)
                for w in new
                for f in w.files
            ),
        )
        self.registry.register(
            s.model_name, ref, parent_version=production.version, reward_fn=s.reward_fn,
            training_window=window, metrics=metrics, version=version,
        )  # fmt: skip


def last_attributed_ms(windows: Sequence[WindowRecord]) -> int:
    """The newest attributed Reward's time (ms) in ``windows`` (WINDOW_LAST_EVENT_METRIC)."""
    return max(w.max_attributed_ms or 0 for w in windows)
