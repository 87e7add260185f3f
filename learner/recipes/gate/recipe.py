"""`flywheel learn`: the continuous learner, one model version per cycle (DESIGN §8).

    wait for new lake rewards → MDS window(s) → train (warm start from production, autoresume)
      → off-policy gate → artifact + REGISTERED/GATE_* → canary on the rewards stream
      → PROMOTED or ROLLED_BACK → repeat

Every step is restartable: windows are converted exactly once (manifest), a training run resumes
from its newest complete checkpoint (its save directory is named after its new windows), and a
version left mid-flight by a crash is finished from its state in ``models.versions``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from learner.continuous import WINDOW_LAST_EVENT_METRIC, LearnerPaths
from learner.data.replay import plan_streams
from learner.data.window_manifest import WindowRecord, read_manifest
from learner.engine.checkpoints import find_resume_checkpoint, load_model_state
from learner.engine.loader import WindowStream
from learner.engine.trainer import Trainer
from learner.errors import LearnerError
from learner.lifecycle import CycleResult, LearnerStats, VersionLifecycle
from learner.recipes.gate.config import LearnerConfig
from learner.recipes.gate.features import feature_columns, point_in_time_enrich
from learner.recipes.gate.objective import GateObjective, fit_reward_model
from learner.recipes.gate.off_policy_check import GatePolicy, OffPolicyGate
from learner.recipes.gate.reward_rows import Enrich, load_rows
from learner.recipes.gate.samples import RewardRows, collate_rows
from learner.recipes.gate.windows import build_window
from model_registry.artifacts import publish_artifact, verify_artifact
from model_registry.canary import user_baselines
from model_registry.registry import ModelRegistry
from policies.gate_net import GatePolicyNet, ServingPolicy, load_net, save_policy
from policies.policy import Policy
from schemas.enums import Channel
from schemas.events import LakeOffsetRange, TrainingWindow
from streams.serde import AvroCodec


class ContinuousLearner:
    """Trains, gates and publishes versions of ``model_name`` from the lake's rewards."""

    def __init__(
        self,
        config: LearnerConfig,
        model_name: str,
        paths: LearnerPaths,
        kafka_config: Mapping[str, Any],
        codec: AvroCodec,
        fallback: Policy,
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config, self.model_name, self.paths = config, model_name, paths
        self._kafka_config, self._codec = dict(kafka_config), codec
        self.registry = ModelRegistry(kafka_config, codec, producer=f"learner/{model_name}")
        self.fallback = fallback  # what production is while no version is promoted (v0)
        self.log = log
        self.stats = LearnerStats()
        self.lifecycle = VersionLifecycle(
            self.registry, kafka_config, codec, model_name, reward_fn=config.reward_fn,
            source="SUGGESTION", cluster_by="user_id", canary=config.canary, stats=self.stats,
            baseline=self._baseline, log=log,
        )  # fmt: skip
        self.dataset = model_name
        self._enrich: Enrich | None = None
        self._extra_columns: tuple[str, ...] = ()
        if config.features:
            # Windows with feature columns are another dataset: MDS samples of one dataset share
            # one layout, and replay mixes windows.
            digest = hashlib.sha256(",".join(config.features).encode()).hexdigest()[:8]
            self.dataset = f"{model_name}.features-{digest}"
            self._enrich = point_in_time_enrich(config.features, paths.lake)
            self._extra_columns = feature_columns(config.features)

    # The loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event, max_versions: int | None = None) -> list[CycleResult]:
        """Cycle until ``stop`` is set or ``max_versions`` versions are decided in total."""

        def next_version() -> CycleResult | None:
            new = self._wait_for_windows(stop)
            return self.cycle(new, stop) if new else None

        return self.lifecycle.run(stop, max_versions, next_version)

    def _wait_for_windows(self, stop: threading.Event) -> list[WindowRecord]:
        """Build windows from new lake files until untrained windows hold enough rows."""
        c = self.config
        trained = self.lifecycle.trained_windows()
        last_note = 0.0
        while not stop.is_set():
            build_window(
                self.paths.lake,
                self.paths.mds_root,
                self.dataset,
                c.reward_fn,
                topic=c.windows.topic,
                split=c.holdout,
                rows_per_sample=c.windows.rows_per_sample,
                compression=c.windows.compression,
                enrich=self._enrich,
                model_name=self.model_name,
            )
            manifest = read_manifest(self.paths.mds_root / self.dataset, self.dataset, c.reward_fn)
            new = [w for w in manifest.windows if w.name not in trained and w.rows > 0]
            rows = sum(w.rows for w in new)
            if rows >= c.loop.min_new_rows:
                return new
            if time.monotonic() - last_note > 30:
                self.log(f"waiting for data: {rows:,} of {c.loop.min_new_rows:,} new rows")
                last_note = time.monotonic()
            stop.wait(c.loop.poll_s)
        return []

    # One version ------------------------------------------------------------------------

    def cycle(self, new: Sequence[WindowRecord], stop: threading.Event) -> CycleResult:
        """Train on ``new`` windows (+ replay), gate, publish, canary; returns the decision."""
        c = self.config
        parent_version, parent_net, production = self._production()
        gated_against: GatePolicy = production
        if parent_net is not None and parent_net.config.extra_columns != self._extra_columns:
            self.log(
                f"production v{parent_version} was trained on extra columns "
                f"{parent_net.config.extra_columns or 'none'}, this config gives "
                f"{self._extra_columns or 'none'}: training a fresh network, no warm start"
            )
            gated_against = self._scored_on_own_features(parent_net, self._recent(new))
            parent_net = None
        train_rows = self._rows(new, holdout=False)
        heldout = self._rows(self._recent(new), holdout=True)
        reward_model = fit_reward_model(train_rows)
        started = time.monotonic()
        net, loss = self._train(
            new,
            parent_net,
            train_rows,
            GateObjective(reward_model, c.objective, reference=parent_net),
        )
        train_s = time.monotonic() - started
        self.stats.train_rows += len(train_rows)
        version = self.registry.next_version(self.model_name)
        candidate = ServingPolicy(net, self.model_name, version)
        decision = OffPolicyGate(c.gate).decide(
            candidate, gated_against, heldout, reward_model=reward_model
        )
        self._register(
            version,
            parent_version,
            net,
            new,
            {
                "train_loss": loss,
                "train_s": train_s,
                "train_rows": float(len(train_rows)),
                "heldout_rows": float(len(heldout)),
                WINDOW_LAST_EVENT_METRIC: float(max(w.max_attributed_ms or 0 for w in new)),
                **decision.interval_metrics(),
            },
        )
        fields = decision.event_fields()
        reason = str(fields.pop("reason"))
        return self.lifecycle.gate(version, parent_version, decision.passed, reason, stop, **fields)

    def _baseline(self, production: int) -> dict[str, float]:
        """Users' mean reward under ``production`` in the newest windows (CUPED covariate)."""
        c = self.config
        manifest = read_manifest(self.paths.mds_root / self.dataset, self.dataset, c.reward_fn)
        recent = manifest.windows[-c.streams.max_replay_windows :]
        files = [self.paths.lake / f.path for w in recent for f in w.files]
        return user_baselines([f for f in files if f.exists()], self.model_name, production,
                              c.reward_fn)  # fmt: skip

    # Pieces -----------------------------------------------------------------------------

    def _production(self) -> tuple[int | None, GatePolicyNet | None, Policy]:
        """(version, network, serving policy) of production; (None, None, fallback) for v0."""
        pointer = self.registry.channels(self.model_name).get(Channel.PRODUCTION)
        if pointer is None:
            return None, None, self.fallback
        directory = verify_artifact(pointer.artifact_uri, pointer.artifact_sha256)
        net = load_net(directory)
        return pointer.version, net, ServingPolicy(net, self.model_name, pointer.version)

    def _recent(self, new: Sequence[WindowRecord]) -> list[WindowRecord]:
        """The gate's windows: the new ones and the ones just before them, up to
        ``loop.heldout_windows`` (held-out rows are never trained on, so older ones stay valid
        evidence, and more rows keep the effective sample size up when a version moves far)."""
        manifest = read_manifest(
            self.paths.mds_root / self.dataset, self.dataset, self.config.reward_fn
        )
        usable = [w for w in manifest.windows if w.heldout_rows > 0]
        names = {w.name for w in new}
        older = [w for w in usable if w.name not in names and w.seq < min(x.seq for x in new)]
        keep = max(0, self.config.loop.heldout_windows - len(new))
        return [*(older[-keep:] if keep else []), *new]

    def _rows(
        self, windows: Sequence[WindowRecord], *, holdout: bool, enrich: Enrich | None = None
    ) -> RewardRows:
        enrich = self._enrich if enrich is None else enrich
        return RewardRows.concat(
            [
                load_rows(
                    self.paths.lake,
                    w,
                    reward_fn=self.config.reward_fn,
                    holdout=holdout,
                    split=self.config.holdout,
                    enrich=enrich,
                    model_name=self.model_name,  # the files hold other models' rows too
                )
                for w in windows
            ]
        )

    def _scored_on_own_features(
        self, net: GatePolicyNet, windows: Sequence[WindowRecord]
    ) -> _FixedScores:
        """Production's P(show) on the held-out rows of ``windows`` with the extra columns it
        was trained on (another feature list than the config's), for the gate's comparison."""
        extra = net.config.extra_columns
        names = extra[: len(extra) // 2]
        if feature_columns(names) != extra:
            raise LearnerError(
                f"production's extra columns {extra} are not feature-store columns; gate it "
                "with its own learner config or start a new model name."
            )
        own = point_in_time_enrich(names, self.paths.lake) if names else _no_features
        rows = self._rows(windows, holdout=True, enrich=own)
        return _FixedScores(ServingPolicy(net, self.model_name, 0).probabilities(rows.features()))

    def _train(
        self,
        new: Sequence[WindowRecord],
        parent: GatePolicyNet | None,
        rows: RewardRows,
        task: GateObjective,
    ) -> tuple[GatePolicyNet, float]:
        c = self.config
        save_dir = self.paths.runs_root / self.model_name / new[-1].name
        init_from = None
        if parent is not None:  # warm start: the production network's weights
            save_dir.mkdir(parents=True, exist_ok=True)
            init_from = save_dir / "init.pt"
            torch.save(parent.state_dict(), init_from)

        def model_factory() -> GatePolicyNet:
            if parent is not None:
                return GatePolicyNet(parent.config)
            net = GatePolicyNet(dataclasses.replace(c.policy, extra_columns=self._extra_columns))
            net.set_standardisation(rows.features())
            return net

        plan = plan_streams(
            self.paths.mds_root,
            self.dataset,
            c.reward_fn,
            new_windows=len(new),
            replay_fraction=c.streams.replay_fraction,
            max_replay_windows=c.streams.max_replay_windows,
        )
        trainer = Trainer(
            dataclasses.replace(c.train, save_dir=save_dir, init_from=init_from),
            task,
            model_factory,
            [WindowStream(local=p.local, proportion=p.proportion) for p in plan],
            collate=collate_rows,
        )
        result = trainer.fit()
        net = model_factory()
        ref = find_resume_checkpoint(save_dir)
        if ref is not None:
            load_model_state(ref, net)
        loss = result.losses[-1] if result.losses else float("nan")
        return net.eval(), loss

    def _register(
        self,
        version: int,
        parent: int | None,
        net: GatePolicyNet,
        new: Sequence[WindowRecord],
        metrics: dict[str, float],
    ) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            save_policy(net, Path(tmp))
            ref = publish_artifact(self.paths.models_root, self.model_name, version, Path(tmp))
        ranges = [
            LakeOffsetRange(topic=f.topic, partition=f.partition, first=f.first, last=f.last)
            for w in new
            for f in w.files
        ]
        window = TrainingWindow(
            mds_dataset=self.dataset,
            mds_windows=tuple(w.name for w in new),
            lake_ranges=tuple(ranges),
        )
        self.registry.register(
            self.model_name,
            ref,
            parent_version=parent,
            reward_fn=self.config.reward_fn,
            training_window=window,
            metrics=metrics,
            version=version,
        )


def _no_features(table: pa.Table) -> pa.Table:
    return table


class _FixedScores:
    """P(show) computed beforehand for exactly the gate's held-out rows (in their order)."""

    def __init__(self, scores: np.ndarray) -> None:
        self._scores = scores

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        if len(features) != len(self._scores):
            raise LearnerError(
                f"scores were computed for {len(self._scores)} rows, the gate asks {len(features)}."
            )
        return self._scores
