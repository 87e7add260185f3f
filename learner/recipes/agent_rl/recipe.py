"""`flywheel learn --recipe agent`: the agent LM's continuous RL learner (DESIGN §12).

    wait for rewarded trials (sandbox rollouts, and completions served to users) in the lake
      → token windows (learner.recipes.agent_rl.windows; the mix: windows.served_weight)
      → GRPO on them, warm-started from production (checkpoints, autoresume, microbatches)
      → the eval suite: candidate vs production, paired, on held-out tasks
        (learner.recipes.agent_rl.eval_check)
      → artifact + REGISTERED / GATE_* with every number → canary on a share of the rollout
        workers' tasks, decided on the online trial reward → PROMOTED or ROLLED_BACK → repeat

Trials sampled by a version more than ``loop.max_staleness`` promotions behind production, or by
one that was never production (a refused or rolled-back canary), weigh 0 (counted). No row of
the lake stops the learner: the windows cut, leave out or dead-letter it, counted in each
version's metrics and in the learner's stats (`learner.recipes.agent_rl.row_admission`).

Restartable like the gate's loop: windows are converted once, a run resumes from its newest
complete checkpoint (its save directory is named after its newest window), a version a crash
left undecided is settled on the next start, and no window is trained by two versions.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contracts.advantages import GROUP_REWARD_FN
from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from learner.config import load_config
from learner.continuous import WINDOW_LAST_EVENT_METRIC, LearnerPaths
from learner.data.replay import StreamsConfig, plan_streams
from learner.data.window_manifest import WindowRecord, read_manifest
from learner.engine.checkpoints import find_resume_checkpoint, load_model_state
from learner.engine.loader import WindowStream
from learner.engine.trainer import Trainer, TrainerConfig
from learner.errors import LearnerError
from learner.eval_suite import EvalConfig, EvalResult, evaluate
from learner.lifecycle import CycleResult, LearnerStats, VersionLifecycle
from learner.recipes.agent_rl.eval_check import AgentGateConfig, decide
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask
from learner.recipes.agent_rl.windows import AgentLakeReads, TokenWindowConfig, build_agent_window
from model_registry.artifacts import publish_artifact, verify_artifact
from model_registry.canary import CanaryConfig
from model_registry.registry import ModelRegistry
from policies.agent_lm import load_checkpoint, save_checkpoint
from schemas.enums import Channel, ModelEventType
from schemas.events import LakeOffsetRange, TrainingWindow
from streams.serde import AvroCodec
from streams.topics import REWARDS_TOPIC

DEFAULT_AGENT_CONFIG = Path(__file__).parent / "configs" / "rl.yaml"


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

    model_name: str = "agent-lm"
    environment: str = PROGRAM_SYNTHESIS
    windows: TokenWindowConfig = field(default_factory=TokenWindowConfig)
    streams: StreamsConfig = field(
        default_factory=lambda: StreamsConfig(replay_fraction=0.5, max_replay_windows=4)
    )
    objective: GRPOConfig = field(default_factory=GRPOConfig)
    train: TrainerConfig = field(default_factory=lambda: AGENT_TRAINING)
    eval: EvalConfig = field(default_factory=EvalConfig)
    gate: AgentGateConfig = field(default_factory=AgentGateConfig)
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


class AgentLearner:
    """Trains, gates and publishes versions of the agent LM from the lake's rewarded trials."""

    def __init__(
        self,
        config: AgentRLConfig,
        paths: LearnerPaths,
        kafka_config: Mapping[str, Any],
        codec: AvroCodec,
        *,
        registry: ModelRegistry | None = None,
        rewards_topic: str = REWARDS_TOPIC,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config, self.paths, self.log = config, paths, log
        self.model_name = config.model_name
        self.dataset = f"{config.model_name}.tokens"
        self.environment = ENVIRONMENTS.get(config.environment)
        self.eval_tasks = self.environment.tasks("eval", config.eval.tasks)
        self.registry = registry or ModelRegistry(
            kafka_config, codec, producer=f"learner/{self.model_name}"
        )
        self.stats = LearnerStats()
        self.lifecycle = VersionLifecycle(
            self.registry, kafka_config, codec, self.model_name, reward_fn=GROUP_REWARD_FN,
            source="ROLLOUT", cluster_by="group_id", canary=config.canary, stats=self.stats,
            rewards_topic=rewards_topic, log=log,
        )  # fmt: skip
        self._evals: dict[int, EvalResult] = {}  # each version's eval suite result, once
        self._reads = AgentLakeReads(paths.lake, self.model_name, config.windows.sources)

    def run(self, stop: threading.Event, max_versions: int | None = None) -> list[CycleResult]:
        """Cycle until ``stop`` is set or ``max_versions`` versions are decided in total."""

        def next_version() -> CycleResult | None:
            production = self._production()
            # Production's eval (once per version) runs while the trials gather, not after
            # training, where it would add to the first version's data -> live time.
            self._production_eval(production)
            new = self._wait_for_windows(production, stop)
            return self.cycle(new, production, stop) if new else None

        return self.lifecycle.run(stop, max_versions, next_version)

    def _wait_for_windows(
        self, production: _Production, stop: threading.Event
    ) -> list[WindowRecord]:
        c = self.config
        trained = self.lifecycle.trained_windows()
        pad = production.tokenizer.pad_token_id
        last_note = 0.0
        vocab = int(production.model.config.vocab_size)
        while not stop.is_set():
            built = build_agent_window(
                self.paths.lake, self.paths.mds_root, self.dataset,
                model_name=self.model_name, pad_id=pad, config=c.windows, reads=self._reads,
                vocab_size=vocab,
            )  # fmt: skip
            if built is not None:
                self._count(built)
            manifest = read_manifest(self.paths.mds_root / self.dataset, self.dataset,
                                     GROUP_REWARD_FN)  # fmt: skip
            new = [w for w in manifest.windows if w.name not in trained and w.rows > 0]
            rows = sum(w.rows for w in new)
            if rows >= c.loop.min_new_rows:
                return new
            if time.monotonic() - last_note > 30:
                self.log(f"waiting for trials: {rows:,} of {c.loop.min_new_rows:,} new rows")
                last_note = time.monotonic()
            stop.wait(c.loop.poll_s)
        return []

    def cycle(
        self, new: Sequence[WindowRecord], production: _Production, stop: threading.Event
    ) -> CycleResult:
        """Train on ``new`` windows (+ replay), gate on the eval suite, publish, canary."""
        c = self.config
        fresh = fresh_versions(self._promotions(), production.version,
                               c.loop.max_staleness)  # fmt: skip
        rows, stale = sum(w.rows for w in new), self._stale_rows(new, fresh)
        newest_ms = max(w.max_attributed_ms or 0 for w in new)
        self.log(f"training on {rows:,} new trials; the newest Reward is "
                 f"{time.time() - newest_ms / 1000:.0f}s old")  # fmt: skip
        started = time.monotonic()
        candidate, fit = self._train(new, production, fresh)
        train_s = time.monotonic() - started
        self.stats.train_rows += rows - stale
        result = self._evaluate(candidate, production.tokenizer)
        decision = decide(result, self._production_eval(production), c.gate)
        eval_s = time.monotonic() - started - train_s
        version = self.registry.next_version(self.model_name)
        metrics = {
            **decision.metrics(),
            "train_tokens": float(fit.progress.tokens),
            "train_rows": float(rows),
            "served_rows": float(sum(w.served_rows for w in new)),
            "train_s": train_s,
            "eval_s": eval_s,  # the candidate's (production's ran before the window)
            "train_loss": fit.losses[-1] if fit.losses else float("nan"),
            "stale_rows": float(stale),
            "zero_advantage_rows": float(sum(w.zero_advantage_rows for w in new)),
            "expired_rows": float(sum(w.expired_rows for w in new)),
            **_admission_metrics(new),
            WINDOW_LAST_EVENT_METRIC: float(newest_ms),
        }
        self._register(version, production, candidate, new, metrics)
        self._evals[version] = result  # the same weights as production's, once it is promoted
        self.log(
            f"v{version}: trained {fit.progress.tokens:,} tokens of {metrics['train_rows']:.0f} "
            f"trials ({metrics['served_rows']:.0f} served, {stale} stale) in {train_s:.0f}s; "
            f"eval pass@1 {result.pass_at_1:.1%} vs "
            f"v{production.version} {decision.production_pass_at_1:.1%} ({eval_s:.0f}s)"
        )
        return self.lifecycle.gate(version, production.version, decision.passed, decision.reason,
                                   stop)  # fmt: skip

    # Pieces -----------------------------------------------------------------------------

    def _production(self) -> _Production:
        pointer = self.registry.channels(self.model_name).get(Channel.PRODUCTION)
        if pointer is None:
            raise LearnerError(
                f"{self.model_name} has no production version to warm-start from; train the "
                "first one with `flywheel learn --recipe agent-sft`."
            )
        directory = verify_artifact(pointer.artifact_uri, pointer.artifact_sha256)
        model, tokenizer = load_checkpoint(directory)
        return _Production(pointer.version, model, tokenizer)

    def _evaluate(self, model: Any, tokenizer: Any) -> EvalResult:
        return evaluate(model, tokenizer, self.environment, self.eval_tasks,
                        max_new_tokens=self.config.eval.max_new_tokens)  # fmt: skip

    def _production_eval(self, production: _Production) -> EvalResult:
        if production.version not in self._evals:
            self._evals[production.version] = self._evaluate(production.model,
                                                             production.tokenizer)  # fmt: skip
        return self._evals[production.version]

    def _promotions(self) -> list[int]:
        """The model's versions in the order they were promoted to production."""
        return [e.version for e in self.registry.history(self.model_name)
                if e.event_type is ModelEventType.PROMOTED]  # fmt: skip

    def _count(self, window: WindowRecord) -> None:
        """Add a new window's cut, left-out and dead-lettered rows to the learner's stats."""
        self.stats.window_rows.update(
            {"cut": window.cut_rows, "overlong": window.overlong_rows,
             "greedy": window.greedy_rows}
        )  # fmt: skip
        self.stats.dead_letters.update(window.dead_letters)
        if window.dead_letter_rows:
            self.log(f"{window.name}: {window.dead_letter_rows} malformed rows left out "
                     f"({window.dead_letters}); see its dead_letters.jsonl")  # fmt: skip

    def _stale_rows(self, windows: Sequence[WindowRecord], fresh: frozenset[int]) -> int:
        """Rows of ``windows`` sampled by versions not in ``fresh``."""
        from streaming import LocalDataset

        stale = 0
        for w in windows:
            dataset = LocalDataset(str(self.paths.mds_root / self.dataset / w.name))
            for i in range(len(dataset)):
                sample = dataset[i]
                versions = sample["version"][: sample["n_rows"]]
                stale += int(np.count_nonzero(~np.isin(versions, list(fresh))))
        return stale

    def _train(
        self, new: Sequence[WindowRecord], production: _Production, fresh: frozenset[int]
    ) -> tuple[Any, Any]:
        c = self.config
        save_dir = self.paths.runs_root / self.model_name / new[-1].name
        save_dir.mkdir(parents=True, exist_ok=True)
        init_from = save_dir / "init.pt"  # warm start: production's weights
        if not init_from.exists():
            torch.save(production.model.state_dict(), init_from)
        shape = production.model.config

        def model_factory() -> Any:
            return type(production.model)(shape)

        reference = production.model if c.objective.kl_coef > 0 else None
        plan = plan_streams(
            self.paths.mds_root, self.dataset, GROUP_REWARD_FN, new_windows=len(new),
            replay_fraction=c.streams.replay_fraction,
            max_replay_windows=c.streams.max_replay_windows,
        )  # fmt: skip
        trainer = Trainer(
            dataclasses.replace(c.train, save_dir=save_dir, init_from=init_from),
            GRPOTask(c.objective, reference, fresh_versions=fresh),
            model_factory,
            [WindowStream(local=p.local, proportion=p.proportion) for p in plan],
        )
        fit = trainer.fit()
        model = model_factory()
        ref = find_resume_checkpoint(save_dir)
        if ref is None:
            raise LearnerError(f"training left no checkpoint under {save_dir}")
        load_model_state(ref, model)
        return model.eval(), fit

    def _register(
        self,
        version: int,
        production: _Production,
        model: Any,
        new: Sequence[WindowRecord],
        metrics: dict[str, float],
    ) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            save_checkpoint(model, production.tokenizer, Path(tmp))
            ref = publish_artifact(self.paths.models_root, self.model_name, version, Path(tmp))
        window = TrainingWindow(
            mds_dataset=self.dataset,
            mds_windows=tuple(w.name for w in new),
            lake_ranges=tuple(
                LakeOffsetRange(topic=f.topic, partition=f.partition, first=f.first, last=f.last)
                for w in new
                for f in w.files
            ),
        )
        self.registry.register(
            self.model_name, ref, parent_version=production.version, reward_fn=GROUP_REWARD_FN,
            training_window=window, metrics=metrics, version=version,
        )  # fmt: skip


def _admission_metrics(windows: Sequence[WindowRecord]) -> dict[str, float]:
    """The windows' cut, left-out and dead-lettered rows, for the version's metrics."""
    return {
        "cut_rows": float(sum(w.cut_rows for w in windows)),
        "overlong_rows": float(sum(w.overlong_rows for w in windows)),
        "greedy_rows": float(sum(w.greedy_rows for w in windows)),
        "dead_letter_rows": float(sum(w.dead_letter_rows for w in windows)),
    }
