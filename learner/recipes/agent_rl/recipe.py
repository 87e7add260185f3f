"""`flywheel learn --recipe agent`: the agent LM's continuous RL learner (DESIGN §12).

    wait for rewarded trials (sandbox rollouts, and completions served to users) in the lake
      → token windows (learner.recipes.agent_rl.windows; the mix: windows.served_weight)
      → GRPO on them, warm-started from production (checkpoints, autoresume, microbatches)
      → the eval suite: candidate vs production, paired, on held-out tasks, bounds clustered
        (learner.recipes.agent_rl.eval_check); pass@1 on the eval_extra set reported beside
      → artifact + REGISTERED / GATE_* with every number → canary on a share of the rollout
        workers' tasks, decided on the online trial reward → PROMOTED or ROLLED_BACK → repeat

Trials sampled by a version more than ``loop.max_staleness`` promotions behind production, or by
one that was never production (a refused or rolled-back canary), weigh 0 (counted). No row of
the lake stops the learner: the windows cut, leave out or dead-letter it, counted in each
version's metrics and in the learner's stats (`learner.recipes.agent_rl.row_admission`).

The loop is learner.continuous's (restartable like every recipe's: windows are converted once,
a run resumes from its newest complete checkpoint, a version a crash left undecided is settled
on the next start, and no window is trained by two versions); :class:`AgentRLRecipe` supplies
the agent's pieces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from contracts.advantages import GROUP_REWARD_FN
from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import Task
from learner.config import load_config
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
from learner.data.replay import StreamsConfig
from learner.data.window_manifest import WindowRecord
from learner.data.window_store import download_window
from learner.engine.trainer import TrainerConfig
from learner.errors import LearnerError
from learner.eval_suite import EvalConfig, EvalResult, evaluate, extra_metrics, load_evals
from learner.lifecycle import LearnerStats
from learner.recipes import RecipeRun, overridden
from learner.recipes.agent_rl.eval_check import EvalCheckConfig, eval_check
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask
from learner.recipes.agent_rl.windows import AgentLakeReads, TokenWindowConfig, build_agent_window
from model_registry.artifacts import verify_artifact
from model_registry.canary import CanaryConfig
from model_registry.registry import ModelRegistry
from policies.agent_lm import load_checkpoint, save_checkpoint
from schemas.enums import Channel, ModelEventType
from streams.topics import REWARDS_TOPIC

DEFAULT_AGENT_CONFIG = Path(__file__).parent / "configs" / "rl.yaml"  # the repository environment
PROGRAM_SYNTHESIS_AGENT_CONFIG = DEFAULT_AGENT_CONFIG.with_name("rl-program-synthesis.yaml")


@dataclass(frozen=True)
class AgentLoopConfig:
    """When a new version is trained, and which trials may train it."""

    min_new_rows: int = 384  # rewarded trials with signal in windows not yet trained on
    max_staleness: int = 2  # trials of versions more promotions behind weigh 0
    poll_s: float = 2.0


# One optimizer step = 8 samples x 16 rows = 128 trials; a fixed budget per version (a pass over
# "all new trials" grows with every slow cycle while the rollout workers keep sampling). Clipped
# and streamed like the warm-up (learner.recipes.agent_sft.recipe.SFT_TRAINING: the versions keep
# the sample order they were measured in).
AGENT_TRAINING = TrainerConfig(
    batch_size=8,
    duration="12ba",
    checkpoint_interval="4ba",
    lr=3e-4,
    grad_clip_norm=1.0,
    loader="streaming",
)
AGENT_CANARY = CanaryConfig(
    traffic_fraction=0.5, min_requests=96, max_requests=384, tolerance=0.03, timeout_s=120.0
)


@dataclass(frozen=True)
class AgentRLConfig:
    """Every section of ``learner/recipes/agent_rl/configs/rl.yaml``."""

    # ``gate:`` was the release check's section before "gate" meant the model only; still read.
    KEY_ALIASES: ClassVar[Mapping[str, str]] = {"gate": "release_check"}

    model_name: str = "agent-lm"
    environment: str = PROGRAM_SYNTHESIS
    windows: TokenWindowConfig = field(default_factory=TokenWindowConfig)
    streams: StreamsConfig = field(
        default_factory=lambda: StreamsConfig(replay_fraction=0.5, max_replay_windows=4)
    )
    objective: GRPOConfig = field(default_factory=GRPOConfig)
    train: TrainerConfig = field(default_factory=lambda: AGENT_TRAINING)
    eval: EvalConfig = field(default_factory=EvalConfig)
    release_check: EvalCheckConfig = field(default_factory=EvalCheckConfig)
    canary: CanaryConfig = field(default_factory=lambda: AGENT_CANARY)
    loop: AgentLoopConfig = field(default_factory=AgentLoopConfig)

    @classmethod
    def load(cls, path: Path = DEFAULT_AGENT_CONFIG) -> AgentRLConfig:
        return load_config(cls, path)


@dataclass(frozen=True)
class _Production:
    version: int
    model: Any
    tokenizer: Any


def fresh_versions(
    promotions: Sequence[int], production: int, max_staleness: int
) -> frozenset[int]:
    """The versions whose trials still train: ``production`` and the versions that were
    production in the ``max_staleness`` promotions before it. Staleness counts promotions
    (``promotions``: versions in the order they were promoted), not version numbers: a refused
    candidate never sampled a trial, and counting it would make the trials of the production it
    left in place stale. A version that was never production — a canary rolled back, whose
    trials carry a number above production's — is not fresh: its trials sampled a policy the
    loop refused. Without any history (``production`` not in ``promotions``): the version
    numbers from ``production - max_staleness`` to ``production``."""
    if production not in promotions:
        return frozenset(range(production - max_staleness, production + 1))
    at = len(promotions) - 1 - promotions[::-1].index(production)
    return frozenset(promotions[max(0, at - max_staleness) : at + 1])


class AgentRLRecipe:
    """The agent's pieces of the continuous loop: production is loaded and evaluated before the
    wait (its eval runs while the trials gather), token windows, GRPO on fresh trials, the eval
    suite check against production, Hugging Face checkpoints as artifacts."""

    def __init__(
        self,
        config: AgentRLConfig,
        paths: LearnerPaths,
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config, self.paths, self.log = config, paths, log
        self.model_name = config.model_name
        self.dataset = f"{config.model_name}.tokens"
        self.environment = ENVIRONMENTS.get_any(config.environment)
        self.eval_tasks = self.environment.tasks("eval", config.eval.tasks)
        extra = config.eval.extra_tasks  # the eval_extra set: reported, never deciding
        self.extra_tasks = self.environment.tasks("eval_extra", extra) if extra > 0 else []
        self._settings = LoopSettings(
            model_name=self.model_name, dataset=self.dataset, reward_fn=GROUP_REWARD_FN,
            min_new_rows=config.loop.min_new_rows, poll_s=config.loop.poll_s,
            waiting_for="trials", streams=config.streams, train=config.train,
            canary=config.canary, canary_source="ROLLOUT", cluster_by="group_id",
            production="before_wait", overwrite_warm_start=False,
            lake_topics=(REWARDS_TOPIC, *(source.topic for source in config.windows.sources)),
        )  # fmt: skip
        self._registry: ModelRegistry | None = None  # production()'s, for the promotions
        self._evals: dict[int, EvalResult] = {}  # each version's eval suite result, once
        self._extra_evals: dict[int, EvalResult] = {}  # and its eval_extra result
        self._reads = AgentLakeReads(paths.lake, self.model_name, config.windows.sources)

    @property
    def settings(self) -> LoopSettings:
        return self._settings

    def production(self, registry: ModelRegistry) -> _Production:
        """Production's checkpoint, evaluated on the eval suite once per version (here, before
        the wait: not after training, where it would add to the first version's data -> live
        time). LearnerError when nothing is promoted: the SFT warm-up makes the first version."""
        self._registry = registry
        pointer = registry.channels(self.model_name).get(Channel.PRODUCTION)
        if pointer is None:
            raise LearnerError(
                f"{self.model_name} has no production version to warm-start from; train the "
                "first one with `flywheel learn --recipe agent-sft`."
            )
        directory = verify_artifact(pointer.artifact_uri, pointer.artifact_sha256)
        model, tokenizer = load_checkpoint(directory)
        production = _Production(pointer.version, model, tokenizer)
        kept = load_evals(directory, self.config.eval)  # measured when it was published
        if kept is not None and pointer.version not in self._evals:
            self._evals[pointer.version] = kept[0]
            if kept[1] is not None:
                self._extra_evals[pointer.version] = kept[1]
        self._production_eval(production)
        return production

    def build_window(self, production: _Production | None, stats: LearnerStats) -> None:
        if production is None:  # settings.production is "before_wait"
            raise LearnerError("the agent's token windows need production's tokenizer first")
        built = build_agent_window(
            self.paths.lake, self.paths.mds_root, self.dataset, model_name=self.model_name,
            pad_id=production.tokenizer.pad_token_id, config=self.config.windows,
            reads=self._reads, vocab_size=int(production.model.config.vocab_size),
        )  # fmt: skip
        if built is not None:
            self._count(built, stats)

    def plan(self, new: Sequence[WindowRecord], production: _Production) -> CyclePlan[Any]:
        """GRPO on ``new`` (+ replay) warm-started from production, trials of stale versions
        weighing 0; the check runs the eval suite and compares with production's result."""
        c = self.config
        fresh = fresh_versions(self._promotions(), production.version,
                               c.loop.max_staleness)  # fmt: skip
        rows, stale = sum(w.rows for w in new), self._stale_rows(new, fresh)
        newest_ms = last_attributed_ms(new)
        self.log(f"training on {rows:,} new trials; the newest Reward is "
                 f"{time.time() - newest_ms / 1000:.0f}s old")  # fmt: skip
        shape = production.model.config

        def model_factory() -> Any:
            return type(production.model)(shape)

        reference = production.model if c.objective.kl_coef > 0 else None

        def check(candidate: Any, version: int, trained: Trained) -> Release:
            started = time.monotonic()
            result = self._evaluate(candidate, production.tokenizer, self.eval_tasks)
            decision = eval_check(result, self._production_eval(production), c.release_check)
            # Reported, never deciding: measured for the versions that go on to the canary.
            extra = (self._extra_eval(version, candidate, production.tokenizer)
                     if decision.passed else None)  # fmt: skip
            eval_s = time.monotonic() - started
            production_extra = self._extra_evals.get(production.version)
            metrics = {
                **decision.metrics(),
                **result.level_metrics(),
                **extra_metrics(extra),
                **extra_metrics(production_extra, "eval_extra_production"),
                "train_tokens": float(trained.fit.progress.tokens),
                "train_rows": float(rows),
                "served_rows": float(sum(w.served_rows for w in new)),
                "train_s": trained.train_s,
                "eval_s": eval_s,  # the candidate's (production's ran before the window)
                "train_loss": trained.loss,
                "stale_rows": float(stale),
                "zero_advantage_rows": float(sum(w.zero_advantage_rows for w in new)),
                "expired_rows": float(sum(w.expired_rows for w in new)),
                **_admission_metrics(new),
                WINDOW_LAST_EVENT_METRIC: float(newest_ms),
            }
            self._evals[version] = result  # the same weights as production's, once promoted
            seen = (f"; {self.environment.extra_eval} {extra.pass_at_1:.1%}"
                    + (f" vs {production_extra.pass_at_1:.1%}" if production_extra else "")
                    if extra is not None else "")  # fmt: skip
            self.log(
                f"v{version}: trained {trained.fit.progress.tokens:,} tokens of "
                f"{metrics['train_rows']:.0f} trials ({metrics['served_rows']:.0f} served, "
                f"{stale} stale) in {trained.train_s:.0f}s; eval pass@1 {result.pass_at_1:.1%} "
                f"vs v{production.version} {decision.production_pass_at_1:.1%} in "
                f"{decision.clusters} clusters{seen} ({eval_s:.0f}s)"
            )
            return Release(decision.passed, decision.reason, metrics)

        return CyclePlan(
            task=GRPOTask(c.objective, reference, fresh_versions=fresh),
            model_factory=model_factory,
            warm_start=production.model,
            trained_rows=rows - stale,
            check=check,
        )

    def save(self, model: Any, production: _Production, directory: Path) -> None:
        save_checkpoint(model, production.tokenizer, directory)

    def canary_baseline(self, production: int) -> dict[str, float]:
        return {}  # trials are clustered by task group; no per-user covariate

    # Pieces -----------------------------------------------------------------------------

    def _evaluate(self, model: Any, tokenizer: Any, tasks: Sequence[Task]) -> EvalResult:
        return evaluate(model, tokenizer, self.environment, tasks,
                        max_new_tokens=self.config.eval.max_new_tokens,
                        limits=self.config.eval.limits())  # fmt: skip

    def _production_eval(self, production: _Production) -> EvalResult:
        """Production's eval suite result (and its eval_extra one), once per version."""
        if production.version not in self._evals:
            self._evals[production.version] = self._evaluate(
                production.model, production.tokenizer, self.eval_tasks
            )
        self._extra_eval(production.version, production.model, production.tokenizer)
        return self._evals[production.version]

    def _extra_eval(self, version: int, model: Any, tokenizer: Any) -> EvalResult | None:
        """``version``'s result on the eval_extra set, once (None when the set is skipped)."""
        if not self.extra_tasks:
            return None
        if version not in self._extra_evals:
            self._extra_evals[version] = self._evaluate(model, tokenizer, self.extra_tasks)
        return self._extra_evals[version]

    def _promotions(self) -> list[int]:
        """The model's versions in the order they were promoted to production."""
        if self._registry is None:
            raise LearnerError("read production (AgentRLRecipe.production) before planning")
        return [e.version for e in self._registry.history(self.model_name)
                if e.event_type is ModelEventType.PROMOTED]  # fmt: skip

    def _count(self, window: WindowRecord, stats: LearnerStats) -> None:
        """Add a new window's cut, left-out and dead-lettered rows to the learner's stats."""
        stats.window_rows.update(
            {"cut": window.cut_rows, "overlong": window.overlong_rows,
             "greedy": window.greedy_rows}
        )  # fmt: skip
        stats.dead_letters.update(window.dead_letters)
        if window.dead_letter_rows:
            self.log(f"{window.name}: {window.dead_letter_rows} malformed rows left out "
                     f"({window.dead_letters}); see its dead_letters.jsonl")  # fmt: skip

    def _window_on_disk(self, name: str) -> Path:
        """The window's directory: built here, or (adopted from the windows store) fetched into
        the cache directory training streams it through."""
        local = self.paths.mds_root / self.dataset / name
        store, cache = self.paths.windows, self.paths.windows_cache
        if (local / "index.json").exists() or store is None or cache is None:
            return local
        return download_window(store, self.dataset, name, cache / self.dataset / name)

    def _stale_rows(self, windows: Sequence[WindowRecord], fresh: frozenset[int]) -> int:
        """Rows of ``windows`` sampled by versions not in ``fresh``."""
        from streaming import LocalDataset

        stale = 0
        for w in windows:
            dataset = LocalDataset(str(self._window_on_disk(w.name)))
            for i in range(len(dataset)):
                sample = dataset[i]
                versions = sample["version"][: sample["n_rows"]]
                stale += int(np.count_nonzero(~np.isin(versions, list(fresh))))
        return stale


def _admission_metrics(windows: Sequence[WindowRecord]) -> dict[str, float]:
    """The windows' cut, left-out and dead-lettered rows, for the version's metrics."""
    return {
        "cut_rows": float(sum(w.cut_rows for w in windows)),
        "overlong_rows": float(sum(w.overlong_rows for w in windows)),
        "greedy_rows": float(sum(w.greedy_rows for w in windows)),
        "dead_letter_rows": float(sum(w.dead_letter_rows for w in windows)),
    }


def main(run: RecipeRun) -> None:
    """`flywheel learn --recipe agent`: versions of the config's model (or ``run.model_name``)
    until ``run.stop`` is set or ``run.max_versions`` are decided."""
    config = overridden(AgentRLConfig.load(run.config_path or DEFAULT_AGENT_CONFIG), run)
    recipe = AgentRLRecipe(config, run.paths, log=run.log)
    learner = ContinuousLearner(recipe, run.paths, run.kafka_config, run.codec, log=run.log)
    run.log(f"agent {config.model_name}: {run.paths.describe(recipe.dataset)}")
    with run.serve_metrics(learner.stats, config.model_name):
        results = learner.run(run.stop, run.max_versions)
    run.log(f"stopped after {len(results)} version(s) this run")
