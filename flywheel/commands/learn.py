"""`flywheel learn`: the continuous learner (lake → MDS → train → gate → publish → canary)."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from flywheel.clients import codec
from flywheel.console import err
from flywheel.isolation import require_model_code_isolation
from flywheel.metrics import LearnerCollector, metrics_endpoint, metrics_options
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals
from ground.metrics import service_registry
from learner.continuous import LearnerPaths
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig
from learner.recipes.gate.recipe import ContinuousLearner
from simulator import DEFAULT_CONFIG_PATH as SIMULATOR_CONFIG_PATH
from simulator import build_policy, load_config

if TYPE_CHECKING:  # the agent recipe loads transformers: imported where it runs
    from learner.recipes.agent_rl.recipe import AgentRLConfig


def _log(message: str) -> None:
    err.print(f"{datetime.now(UTC):%H:%M:%S} learner: {message}", highlight=False)


RECIPES = ("gate", "agent-sft", "agent")
GATE_MODEL = "suggestion-gate"


@click.command()
@click.option(
    "--recipe",
    type=click.Choice(RECIPES),
    default="gate",
    show_default=True,
    help="gate: the continuous suggestion-gate learner. agent-sft: the agent LM's first "
    "version, by supervised warm-up (then it exits). agent: the agent LM's continuous RL "
    "learner.",
)
@click.option(
    "--model",
    "model_name",
    default=None,
    help=f"Model to train; only its own reward rows are used. Default: {GATE_MODEL} (gate), "
    "the config's model_name (agent-sft, agent).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The recipe's config (YAML). Default: learner/recipes/gate/configs/default.yaml (gate), "
    "learner/recipes/agent_sft/configs/sft.yaml (agent-sft), "
    "learner/recipes/agent_rl/configs/rl.yaml (agent).",
)
@click.option(
    "--max-versions",
    type=click.IntRange(1),
    default=None,
    help="Stop once this many versions of the model are decided. Default: run until Ctrl-C.",
)
@click.option(
    "--min-rows",
    type=click.IntRange(1),
    default=None,
    help="Override loop.min_new_rows: new training rows needed per version.",
)
@click.option("--duration", default=None, help="Override train.duration, e.g. 20ep, 500ba, 90s.")
@metrics_options
def learn(
    recipe: str,
    model_name: str | None,
    config_path: Path | None,
    max_versions: int | None,
    min_rows: int | None,
    duration: str | None,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Turn new lake rewards into gated model versions, continuously (--recipe gate, agent), or
    train the agent LM's first version (--recipe agent-sft).

    gate: each cycle waits for new Reward files in the lake, converts them into an MDS window,
    trains the suggestion gate warm-started from production (checkpoints, autoresume), evaluates
    it off-policy against production on held-out rows, publishes the artifact and its
    ModelVersionEvents, and canaries a passing version on live traffic before promoting or
    rolling it back. Restartable at any point; Ctrl-C (or SIGTERM) stops it.

    agent-sft: trains a tokenizer and the LM on reference solutions of the environment's
    training tasks, records its eval-suite pass@1 (held-out tasks) and registers it as the
    agent's production version. A killed run resumes from its checkpoints.

    agent: each cycle turns new rewarded rollouts in the lake into token windows, trains the
    agent LM warm-started from production with a GRPO-family objective (behaviour log-probs,
    clip-higher, truncated importance sampling, a staleness bound), compares it with production
    on the held-out eval suite (paired pass@1 and reward with bootstrap bounds), and canaries a
    passing version on a share of the rollout workers' tasks before promoting or rolling back.
    """
    settings = Settings.from_env()
    if recipe != "gate":  # the eval suite runs model-written code: fail closed first
        require_model_code_isolation(f"learn --recipe {recipe}")
    if recipe == "agent-sft":
        _agent_sft(settings, model_name, config_path, duration)
        return
    paths = LearnerPaths(
        lake=settings.lake,
        mds_root=settings.home / "mds",
        models_root=settings.home / "models",
        runs_root=settings.home / "runs",
    )
    stop = stop_on_signals()
    if recipe == "agent":
        _agent(settings, paths, stop, model_name, config_path, max_versions, min_rows, duration,
               metrics_port, metrics_host)  # fmt: skip
        return
    model_name = model_name or GATE_MODEL
    config = _overridden(LearnerConfig.load(config_path or DEFAULT_CONFIG_PATH), min_rows, duration)
    fallback = build_policy(load_config(SIMULATOR_CONFIG_PATH).policy)  # v0: the heuristic
    learner = ContinuousLearner(
        config,
        model_name,
        paths,
        settings.kafka_client_config(),
        codec(settings),
        fallback,
        log=_log,
    )
    _log(f"model {model_name}: lake {paths.lake}, MDS {paths.mds_root}, models {paths.models_root}")
    if config.features:
        _log(f"policy input: context + features {', '.join(config.features)} (point in time)")
    registry = service_registry(LearnerCollector(learner.stats, model_name))
    with metrics_endpoint(metrics_port, metrics_host, registry):
        results = learner.run(stop, max_versions)
    _log(f"stopped after {len(results)} version(s) this run")


Recipe = TypeVar("Recipe", "LearnerConfig", "AgentRLConfig")


def _overridden(config: Recipe, min_rows: int | None, duration: str | None) -> Recipe:
    """``config`` with --min-rows (loop.min_new_rows) and --duration (train.duration) applied."""
    if min_rows is not None:
        config = dataclasses.replace(
            config, loop=dataclasses.replace(config.loop, min_new_rows=min_rows)
        )
    if duration is not None:
        config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, duration=duration)
        )
    return config


def _agent(
    settings: Settings,
    paths: LearnerPaths,
    stop: threading.Event,
    model_name: str | None,
    config_path: Path | None,
    max_versions: int | None,
    min_rows: int | None,
    duration: str | None,
    metrics_port: int,
    metrics_host: str,
) -> None:
    from learner.recipes.agent_rl.recipe import DEFAULT_AGENT_CONFIG, AgentLearner, AgentRLConfig

    config = _overridden(
        AgentRLConfig.load(config_path or DEFAULT_AGENT_CONFIG), min_rows, duration
    )
    if model_name is not None:
        config = dataclasses.replace(config, model_name=model_name)
    learner = AgentLearner(config, paths, settings.kafka_client_config(), codec(settings),
                           log=_log)  # fmt: skip
    _log(f"agent {config.model_name}: lake {paths.lake}, MDS {paths.mds_root}/{learner.dataset}")
    registry = service_registry(LearnerCollector(learner.stats, config.model_name))
    with metrics_endpoint(metrics_port, metrics_host, registry):
        results = learner.run(stop, max_versions)
    _log(f"stopped after {len(results)} version(s) this run")


def _agent_sft(
    settings: Settings, model_name: str | None, config_path: Path | None, duration: str | None
) -> None:
    from learner.recipes.agent_sft.recipe import DEFAULT_SFT_CONFIG, AgentSFTConfig, run_sft
    from model_registry.registry import ModelRegistry

    config = AgentSFTConfig.load(config_path or DEFAULT_SFT_CONFIG)
    if model_name is not None:
        config = dataclasses.replace(config, model_name=model_name)
    if duration is not None:
        config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, duration=duration)
        )
    registry = ModelRegistry(settings.kafka_client_config(), codec(settings))
    # Keyed by what determines the weights (not the model's name): a second model warmed up with
    # the same config reuses the finished run, and a killed run resumes.
    run_dir = settings.home / "runs" / "agent-sft" / config.digest()
    _log(f"agent-sft: {config.model_name} ({config.model.architecture}), run {run_dir}")
    result = run_sft(
        config, run_dir, registry=registry, models_root=settings.home / "models", log=_log
    )
    _log(
        f"{config.model_name} v{result.version}: {result.parameters:,} parameters, eval pass@1 "
        f"{result.eval.pass_at_1:.1%} ({len(result.eval.passed)} held-out tasks)"
    )
