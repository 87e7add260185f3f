"""`flywheel learn` (``--recipe gate``): the suggestion gate's continuous recipe (DESIGN §8).

    wait for new lake rewards → MDS window(s) → train (warm start from production, autoresume)
      → off-policy check → artifact + REGISTERED/GATE_* → canary on the rewards stream
      → PROMOTED or ROLLED_BACK → repeat

The loop is learner.continuous's; :class:`GateRecipe` supplies the gate's pieces: production
(the heuristic v0 until a version is promoted), reward-row windows with held-out rows, the
network and its objective, the off-policy check on the held-out rows, and the CUPED covariates of
the canary.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from feature_store.declarations import load_features
from learner.continuous import (
    WINDOW_LAST_EVENT_METRIC,
    ContinuousLearner,
    CyclePlan,
    LearnerPaths,
    LoopSettings,
    Release,
    Trained,
    last_attributed_ms,
)
from learner.data.window_manifest import WindowRecord, read_manifest
from learner.errors import LearnerError
from learner.lifecycle import LearnerStats
from learner.recipes import RecipeRun, overridden
from learner.recipes.gate import GATE_MODEL
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig
from learner.recipes.gate.features import feature_columns, point_in_time_enrich
from learner.recipes.gate.objective import GateObjective, fit_reward_model
from learner.recipes.gate.off_policy_check import CheckedPolicy, OffPolicyCheck
from learner.recipes.gate.reward_rows import Enrich, load_rows
from learner.recipes.gate.samples import RewardRows, collate_rows
from learner.recipes.gate.windows import build_window
from model_registry.artifacts import verify_artifact
from model_registry.canary import user_baselines
from model_registry.registry import ModelRegistry
from policies.gate_net import GatePolicyNet, ServingPolicy, load_net, save_policy
from policies.policy import Policy, fallback_policy
from schemas.enums import Channel


@dataclass(frozen=True)
class GateProduction:
    """Production's version (None: nothing promoted), network (None for the v0 heuristic) and
    serving policy."""

    version: int | None
    net: GatePolicyNet | None
    policy: Policy


class GateRecipe:
    """The gate's pieces of the continuous loop, for versions of ``model_name``."""

    def __init__(
        self,
        config: LearnerConfig,
        model_name: str,
        paths: LearnerPaths,
        fallback: Policy,
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config, self.model_name, self.paths = config, model_name, paths
        self.fallback = fallback  # what production is while no version is promoted (v0)
        self.log = log
        dataset = model_name
        self._enrich: Enrich | None = None
        self._extra_columns: tuple[str, ...] = ()
        # Every declared feature's source: production may use other features than the config's.
        topics = [config.windows.topic, *load_features().sources()]
        if config.features:
            # Windows with feature columns are another dataset: MDS samples of one dataset share
            # one layout, and replay mixes windows.
            digest = hashlib.sha256(",".join(config.features).encode()).hexdigest()[:8]
            dataset = f"{model_name}.features-{digest}"
            self._enrich = point_in_time_enrich(config.features, paths.lake)
            self._extra_columns = feature_columns(config.features)
        self.dataset = dataset
        self._settings = LoopSettings(
            model_name=model_name, dataset=dataset, reward_fn=config.reward_fn,
            min_new_rows=config.loop.min_new_rows, poll_s=config.loop.poll_s,
            waiting_for="data", streams=config.streams, train=config.train,
            canary=config.canary, canary_source="SUGGESTION", cluster_by="user_id",
            production="after_wait", overwrite_warm_start=True, lake_topics=tuple(topics),
        )  # fmt: skip

    @property
    def settings(self) -> LoopSettings:
        return self._settings

    def production(self, registry: ModelRegistry) -> GateProduction:
        """Production's version, network and serving policy; (None, None, fallback) for v0."""
        pointer = registry.channels(self.model_name).get(Channel.PRODUCTION)
        if pointer is None:
            return GateProduction(None, None, self.fallback)
        directory = verify_artifact(pointer.artifact_uri, pointer.artifact_sha256)
        net = load_net(directory)
        return GateProduction(
            pointer.version, net, ServingPolicy(net, self.model_name, pointer.version)
        )

    def build_window(self, production: GateProduction | None, stats: LearnerStats) -> None:
        c = self.config
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

    def plan(
        self, new: Sequence[WindowRecord], production: GateProduction
    ) -> CyclePlan[GatePolicyNet]:
        """Train on ``new`` (+ replay) warm-started from production's network, with a reward
        model fitted on the training rows; the release check compares with production on held-out
        rows."""
        c = self.config
        parent = production.net
        checked_against: CheckedPolicy = production.policy
        if parent is not None and parent.config.extra_columns != self._extra_columns:
            self.log(
                f"production v{production.version} was trained on extra columns "
                f"{parent.config.extra_columns or 'none'}, this config gives "
                f"{self._extra_columns or 'none'}: training a fresh network, no warm start"
            )
            checked_against = self._scored_on_own_features(parent, self._recent(new))
            parent = None
        train_rows = self._rows(new, holdout=False)
        heldout = self._rows(self._recent(new), holdout=True)
        reward_model = fit_reward_model(train_rows)

        def model_factory() -> GatePolicyNet:
            if parent is not None:
                return GatePolicyNet(parent.config)
            net = GatePolicyNet(dataclasses.replace(c.policy, extra_columns=self._extra_columns))
            net.set_standardisation(train_rows.features())
            return net

        def check(net: GatePolicyNet, version: int, trained: Trained) -> Release:
            candidate = ServingPolicy(net, self.model_name, version)
            decision = OffPolicyCheck(c.release_check).decide(
                candidate, checked_against, heldout, reward_model=reward_model
            )
            metrics = {
                "train_loss": trained.loss,
                "train_s": trained.train_s,
                "train_rows": float(len(train_rows)),
                "heldout_rows": float(len(heldout)),
                WINDOW_LAST_EVENT_METRIC: float(last_attributed_ms(new)),
                **decision.metrics(),
            }
            fields = decision.event_fields()
            reason = str(fields.pop("reason"))
            return Release(decision.passed, reason, metrics, fields)

        return CyclePlan(
            task=GateObjective(reward_model, c.objective, reference=parent),
            model_factory=model_factory,
            warm_start=parent,
            trained_rows=len(train_rows),
            check=check,
            collate=collate_rows,
        )

    def save(self, model: GatePolicyNet, production: GateProduction, directory: Path) -> None:
        save_policy(model, directory)

    def canary_baseline(self, production: int) -> dict[str, float]:
        """Users' mean reward under ``production`` in the newest windows (CUPED covariate)."""
        c = self.config
        manifest = read_manifest(self.paths.mds_root / self.dataset, self.dataset, c.reward_fn)
        recent = manifest.windows[-c.streams.max_replay_windows :]
        files = [self.paths.lake / f.path for w in recent for f in w.files]
        return user_baselines([f for f in files if f.exists()], self.model_name, production,
                              c.reward_fn)  # fmt: skip

    # Pieces -----------------------------------------------------------------------------

    def _recent(self, new: Sequence[WindowRecord]) -> list[WindowRecord]:
        """The release check's windows: the new ones and the ones just before them, up to
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
        was trained on (another feature list than the config's), for the release check's
        comparison."""
        extra = net.config.extra_columns
        names = extra[: len(extra) // 2]
        if feature_columns(names) != extra:
            raise LearnerError(
                f"production's extra columns {extra} are not feature-store columns; check it "
                "with its own learner config or start a new model name."
            )
        own = point_in_time_enrich(names, self.paths.lake) if names else _no_features
        rows = self._rows(windows, holdout=True, enrich=own)
        return _FixedScores(ServingPolicy(net, self.model_name, 0).probabilities(rows.features()))


def _no_features(table: pa.Table) -> pa.Table:
    return table


class _FixedScores:
    """P(show) computed beforehand for exactly the check's held-out rows (in their order)."""

    def __init__(self, scores: np.ndarray) -> None:
        self._scores = scores

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        if len(features) != len(self._scores):
            raise LearnerError(
                f"scores were computed for {len(self._scores)} rows, the check asks "
                f"{len(features)}."
            )
        return self._scores


def main(run: RecipeRun) -> None:
    """`flywheel learn --recipe gate`: versions of ``run.model_name`` (default suggestion-gate)
    until ``run.stop`` is set or ``run.max_versions`` are decided."""
    model_name = run.model_name or GATE_MODEL
    config = overridden(LearnerConfig.load(run.config_path or DEFAULT_CONFIG_PATH), run)
    fallback = fallback_policy(model_name)  # v0: the heuristic, as serving replicas build it
    recipe = GateRecipe(config, model_name, run.paths, fallback, log=run.log)
    learner = ContinuousLearner(recipe, run.paths, run.kafka_config, run.codec, log=run.log)
    paths = run.paths
    run.log(f"model {model_name}: {paths.describe(recipe.dataset)}, models {paths.models_root}")
    if config.features:
        run.log(f"policy input: context + features {', '.join(config.features)} (point in time)")
    with run.serve_metrics(learner.stats, model_name):
        results = learner.run(run.stop, run.max_versions)
    run.log(f"stopped after {len(results)} version(s) this run")
