"""`flywheel learn`: the continuous learner (lake → MDS → train → check → publish → canary)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from flywheel.clients import codec
from flywheel.console import err
from flywheel.isolation import require_model_code_isolation
from flywheel.metrics import LearnerCollector, metrics_endpoint, metrics_options
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals
from ground.metrics import service_registry
from learner.continuous import LearnerPaths
from learner.recipes import RECIPES, RecipeRun
from learner.recipes.gate import GATE_MODEL

if TYPE_CHECKING:
    from learner.lifecycle import LearnerStats


def _log(message: str) -> None:
    err.print(f"{datetime.now(UTC):%H:%M:%S} learner: {message}", highlight=False)


def learner_paths(settings: Settings) -> LearnerPaths:
    """Where a learner keeps its files under FLYWHEEL_HOME. A lake in an object store is read
    through a mirror under `cache/lake`; with FLYWHEEL_WINDOWS, windows are published there and
    streamed through `cache/windows` (docs/object-storage.md)."""
    home = settings.home
    on_disk = settings.lake_on_disk
    return LearnerPaths(
        lake=settings.lake if on_disk else home / "cache" / "lake",
        mds_root=home / "mds",
        models_root=settings.models_root(),
        runs_root=home / "runs",
        lake_store=None if on_disk else settings.lake_store(),
        windows=settings.windows_store(),
        windows_cache=home / "cache" / "windows",
        windows_cache_limit=settings.windows_cache_bytes,
    )


@click.command()
@click.option(
    "--recipe",
    type=click.Choice(tuple(RECIPES)),
    default="gate",
    show_default=True,
    help="gate: the continuous suggestion-gate learner. agent-sft: the agent LM's first "
    "version, by supervised warm-up (then it exits). agent: the agent LM's continuous RL "
    "learner. code-embedder: the codebase index's embedder, trained on this machine's Python "
    "sources (then it exits).",
)
@click.option(
    "--model",
    "model_name",
    default=None,
    help=f"Model to train; only its own reward rows are used. Default: {GATE_MODEL} (gate), "
    "the config's model_name (agent-sft, agent, code-embedder).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The recipe's config (YAML). Default: learner/recipes/gate/configs/default.yaml (gate), "
    "learner/recipes/agent_sft/configs/sft.yaml (agent-sft), "
    "learner/recipes/agent_rl/configs/rl.yaml (agent), "
    "learner/recipes/code_embedder/configs/default.yaml (code-embedder).",
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
@click.option(
    "--train-duration",
    "duration",
    default=None,
    help="Override train.duration: the training budget per version in epochs (20ep), batches "
    "(500ba) or wall time (90s). Default: the config's.",
)
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
    """Turn new lake rewards into checked model versions, continuously (--recipe gate, agent), or
    train the agent LM's first version (--recipe agent-sft) or the code index's embedder
    (--recipe code-embedder).

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

    code-embedder: mines (docstring sentence, code) pairs from the standard library and
    site-packages (the benchmark's held-out packages excluded), trains the bi-encoder
    contrastively, measures it on the held-out packages and registers it as production
    (docs/index.md).
    """
    settings = Settings.from_env()
    entry = RECIPES[recipe]  # learner/recipes/__init__.py: name → module, and what it needs
    if entry.runs_model_code:  # the eval suite runs model-written code: fail closed first
        require_model_code_isolation(f"learn --recipe {recipe}")
    stop = stop_on_signals() if entry.continuous else threading.Event()

    @contextmanager
    def serve_metrics(stats: LearnerStats, model: str) -> Iterator[None]:
        registry = service_registry(LearnerCollector(stats, model))
        with metrics_endpoint(metrics_port, metrics_host, registry):
            yield

    run = RecipeRun(
        config_path=config_path,
        model_name=model_name,
        max_versions=max_versions,
        min_rows=min_rows,
        duration=duration,
        paths=learner_paths(settings),
        kafka_config=settings.kafka_client_config(),
        codec=codec(settings),
        stop=stop,
        serve_metrics=serve_metrics,
        log=_log,
    )
    entry.main()(run)
