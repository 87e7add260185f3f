"""The agent's warm-up recipe (``flywheel learn --recipe agent-sft``): the model's first version,
from supervised training on correct solutions, before any RL (DESIGN §12).

Read top to bottom: a corpus of (prompt, reference solution) pairs from the environment's
training tasks → a byte-level BPE tokenizer trained on it → one MDS token window → the training
engine (`learner.engine.trainer.Trainer`: checkpoints, autoresume, microbatching) with next-token
cross-entropy on the solution tokens → a Hugging Face checkpoint → the eval suite's greedy pass@1
on held-out tasks (the baseline every later version is checked against; the ``eval_extra`` set's
beside it) → an artifact registered
and promoted to production, its pass@1 in the event's metrics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.base import AnyEnvironment, Task
from ground.store import Store
from learner.config import load_config
from learner.data.token_windows import TokenSampleSpec, write_token_window
from learner.engine.causal_lm import CausalLMTask
from learner.engine.checkpoints import load_trained
from learner.engine.loader import WindowStream
from learner.engine.trainer import FitResult, StepReport, Trainer, TrainerConfig
from learner.errors import LearnerError
from learner.eval_suite import (
    EvalConfig,
    EvalResult,
    evaluate,
    extra_metrics,
    load_evals,
    save_evals,
)
from learner.recipes import RecipeRun, overridden
from learner.recipes.agent_sft.corpus import build_corpus
from learner.recipes.agent_sft.shipped import corpus_fingerprint, find_shipped
from model_registry.artifacts import publish_artifact
from model_registry.registry import ModelRegistry
from policies.agent_lm import (
    AgentModelConfig,
    build_model,
    load_checkpoint,
    parameter_count,
    save_checkpoint,
)

DEFAULT_SFT_CONFIG = Path(__file__).parent / "configs" / "sft.yaml"  # the repository environment
PROGRAM_SYNTHESIS_SFT_CONFIG = DEFAULT_SFT_CONFIG.with_name("sft-program-synthesis.yaml")
SFT_REWARD_FN = "sft@1"  # the first version learns from references, not from a reward


@dataclass(frozen=True)
class CorpusConfig:
    """The supervised corpus: training tasks with their reference solutions."""

    tasks: int = 4000
    seed: int = 0
    seq_len: int = 112  # tokens per row; prompt starts are cut to fit
    rows_per_sample: int = 16


# The recipe's training budget (the engine's own defaults are the gate's): 300 steps of 64
# sequences, ~2.5 minutes on 2 CPU cores for the default model.
# The agent recipes stream their windows: the LM's forward and backward dominate either way
# (bench/learner_agent.py), and the versions they produce keep the order they were measured in
# (docs/agent.md: a changed sample order moves the tiny models' greedy pass@1 by points).
SFT_TRAINING = TrainerConfig(
    batch_size=4,
    duration="300ba",
    checkpoint_interval="100ba",
    lr=3e-3,
    grad_clip_norm=1.0,
    loader="streaming",
)


@dataclass(frozen=True)
class AgentSFTConfig:
    """Every section of ``learner/recipes/agent_sft/configs/sft.yaml``."""

    model_name: str = "agent-lm"
    environment: str = PROGRAM_SYNTHESIS
    model: AgentModelConfig = field(default_factory=AgentModelConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    train: TrainerConfig = field(default_factory=lambda: SFT_TRAINING)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0

    @classmethod
    def load(cls, path: Path = DEFAULT_SFT_CONFIG) -> AgentSFTConfig:
        return load_config(cls, path)

    def digest(self) -> str:
        """12 hex of the settings that determine the trained weights (all but the name and the
        eval suite's size)."""
        settings = dataclasses.asdict(dataclasses.replace(self, model_name=""))
        del settings["eval"]
        return hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Trained:
    """How the weights came about: the engine's run (None for a shipped warm-up), the tokens
    trained, the last loss and the seconds it took here."""

    fit: FitResult | None
    tokens: int
    loss: float
    seconds: float


@dataclass(frozen=True)
class SFTResult:
    """What the warm-up produced."""

    version: int | None  # registered version (None when not registered)
    checkpoint: Path
    parameters: int
    trained: Trained
    eval: EvalResult
    extra: EvalResult | None = None  # the eval_extra set (report only; None: skipped)


def run_sft(
    config: AgentSFTConfig,
    run_dir: Path,
    *,
    registry: ModelRegistry | None = None,
    models_root: Path | Store | None = None,
    log: Callable[[str], None] = print,
    use_shipped: bool = True,
) -> SFTResult:
    """Train the first version under ``run_dir`` (resuming a killed run) — or take the shipped
    one for this config and corpus (`learner.recipes.agent_sft.shipped`) —, evaluate it, and
    with ``registry`` and ``models_root`` publish, register and promote it."""
    if config.corpus.seq_len > config.model.max_positions:
        raise LearnerError(
            f"corpus.seq_len {config.corpus.seq_len} exceeds model.max_positions "
            f"{config.model.max_positions}; raise max_positions"
        )
    environment = ENVIRONMENTS.get_any(config.environment)
    tasks = environment.tasks("train", config.corpus.tasks, seed=config.corpus.seed)
    checkpoint = run_dir / "hf"
    shipped = None
    if use_shipped:
        fingerprint = corpus_fingerprint(environment, tasks)
        shipped = find_shipped(config.digest(), fingerprint)
    if shipped is not None:
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.copytree(shipped.checkpoint, checkpoint)
        model, tokenizer = load_checkpoint(checkpoint)
        trained = Trained(None, int(shipped.meta["train_tokens"]),
                          float(shipped.meta["train_loss"]), 0.0)  # fmt: skip
        log(f"the shipped warm-up of this config and corpus ({config.digest()}): "
            f"{trained.tokens:,} tokens trained by `make agent-warm-up`")  # fmt: skip
    else:
        model, tokenizer, trained = _train(config, environment, tasks, run_dir, log)
        shutil.rmtree(checkpoint, ignore_errors=True)
        save_checkpoint(model, tokenizer, checkpoint)
    evaluated = load_evals(checkpoint, config.eval)  # a shipped warm-up's, measured at shipping
    if evaluated is not None:
        result, extra = evaluated
        log("eval results kept with the checkpoint (the same weights, tasks and eval settings)")
    else:
        result, extra = _evaluate(config, environment, model, tokenizer)
        save_evals(checkpoint, config.eval, result, extra)  # published with it
    levels = ", ".join(f"level {k} {v:.1%}" for k, v in result.level_pass_at_1().items())
    log(
        f"eval pass@1 {result.pass_at_1:.1%} on {len(result.passed)} held-out tasks ({levels})"
        + (f"; {extra.pass_at_1:.1%} on {len(extra.passed)} of {environment.extra_eval}"
           if extra is not None else "")
    )  # fmt: skip
    version = None
    if registry is not None and models_root is not None:
        version = _publish(config, registry, models_root, checkpoint, trained, result, model,
                           extra)  # fmt: skip
        log(f"{config.model_name} v{version} registered and promoted to production")
    return SFTResult(version, checkpoint, parameter_count(model), trained, result, extra)


def _evaluate(
    config: AgentSFTConfig, environment: AnyEnvironment, model: Any, tokenizer: Any
) -> tuple[EvalResult, EvalResult | None]:
    """The eval suite on the held-out tasks, and on the first ``extra_tasks`` of eval_extra."""
    limits = config.eval.limits()
    eval_tasks = environment.tasks("eval", config.eval.tasks)
    result = evaluate(model, tokenizer, environment, eval_tasks,
                      max_new_tokens=config.eval.max_new_tokens, limits=limits)  # fmt: skip
    extra = None
    if config.eval.extra_tasks > 0:
        extra_tasks = environment.tasks("eval_extra", config.eval.extra_tasks)
        extra = evaluate(model, tokenizer, environment, extra_tasks,
                         max_new_tokens=config.eval.max_new_tokens, limits=limits)  # fmt: skip
    return result, extra


def _train(
    config: AgentSFTConfig,
    environment: AnyEnvironment,
    tasks: list[Task],
    run_dir: Path,
    log: Callable[[str], None],
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, Trained]:
    """The corpus (built once per run dir) and the training engine's run on it."""
    window, tokenizer_dir = run_dir / "window", run_dir / "tokenizer"
    if window.exists() and tokenizer_dir.exists():  # a resumed run: the corpus is built
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir, local_files_only=True)
    else:
        corpus = build_corpus(environment, tasks, config.model.vocab_size,
                              config.corpus.seq_len, log)  # fmt: skip
        tokenizer, rows = corpus.tokenizer, corpus.rows
        shutil.rmtree(window, ignore_errors=True)
        spec = TokenSampleSpec(config.corpus.seq_len, config.corpus.rows_per_sample)
        write_token_window(window, rows, spec)
        tokenizer.save_pretrained(tokenizer_dir)
        log(
            f"corpus: {len(rows):,} {corpus.kind}, {rows.trained_tokens:,} target tokens, "
            f"vocabulary {len(tokenizer)}"
            + (f", {corpus.left_out} longer than seq_len left out" if corpus.left_out else "")
        )

    def model_factory() -> PreTrainedModel:
        torch.manual_seed(config.seed)
        return build_model(config.model, tokenizer)

    def on_step(report: StepReport) -> None:
        if report.rank == 0 and report.progress.batches % 25 == 0:
            log(f"step {report.progress.batches}: loss {report.loss:.3f}")

    started = time.monotonic()
    trainer = Trainer(
        dataclasses.replace(config.train, save_dir=run_dir / "checkpoints"),
        CausalLMTask(),
        model_factory,
        [WindowStream(window)],
        on_step=on_step,
    )
    fit = trainer.fit()
    train_s = time.monotonic() - started
    model = load_trained(run_dir / "checkpoints", model_factory)  # the end of the budget
    log(f"trained {fit.progress.tokens:,} tokens in {train_s:.0f}s")
    loss = fit.losses[-1] if fit.losses else float("nan")
    return model, tokenizer, Trained(fit, fit.progress.tokens, loss, train_s)


def _publish(
    config: AgentSFTConfig,
    registry: ModelRegistry,
    models_root: Path | Store,
    checkpoint: Path,
    trained: Trained,
    result: EvalResult,
    model: PreTrainedModel,
    extra: EvalResult | None,
) -> int:
    version = registry.next_version(config.model_name)
    artifact = publish_artifact(models_root, config.model_name, version, checkpoint)
    metrics = {
        "eval_pass_at_1": result.pass_at_1,
        "eval_mean_reward": result.mean_reward,
        "eval_tasks": float(len(result.passed)),
        **result.level_metrics(),
        **extra_metrics(extra),
        "train_tokens": float(trained.tokens),
        "train_loss": trained.loss,
        "parameters": float(parameter_count(model)),
    }
    registry.register(
        config.model_name, artifact, parent_version=None, reward_fn=SFT_REWARD_FN,
        metrics=metrics, version=version,
        reason=f"supervised warm-up: eval pass@1 {result.pass_at_1:.3f}, the agent's baseline",
    )  # fmt: skip
    registry.promote(config.model_name, version, reason="the first version: SFT baseline")
    return version


def main(run: RecipeRun) -> None:
    """`flywheel learn --recipe agent-sft`: the first version of the config's model (or
    ``run.model_name``), registered and promoted; a killed run resumes."""
    config = overridden(AgentSFTConfig.load(run.config_path or DEFAULT_SFT_CONFIG), run)
    registry = ModelRegistry(run.kafka_config, run.codec)
    # Keyed by what determines the weights (not the model's name): a second model warmed up with
    # the same config reuses the finished run, and a killed run resumes.
    run_dir = run.paths.runs_root / "agent-sft" / config.digest()
    run.log(f"agent-sft: {config.model_name} ({config.model.architecture}), run {run_dir}")
    result = run_sft(config, run_dir, registry=registry, models_root=run.paths.models_root,
                     log=run.log)  # fmt: skip
    run.log(
        f"{config.model_name} v{result.version}: {result.parameters:,} parameters, eval pass@1 "
        f"{result.eval.pass_at_1:.1%} ({len(result.eval.passed)} held-out tasks)"
        + (f", eval_extra pass@1 {result.extra.pass_at_1:.1%} ({len(result.extra.passed)} tasks)"
           if result.extra is not None else "")
    )  # fmt: skip
