"""Learner recipes: one folder per way of training a model, with its own code and YAML configs.

``gate/`` trains the suggestion-gate network from reward rows; ``agent_sft/`` warms the agent LM
up on demonstrations; ``agent_rl/`` trains it with GRPO on trials and served completions;
``code_embedder/`` trains the codebase index's embedder on this machine's Python sources. A
recipe's defaults are in its ``configs/`` folder; what recipes share (the engine, the data
windows, the continuous loop, the eval suite) lives in ``learner/`` above them.

:data:`RECIPES` is the one registry of them, ``flywheel learn --recipe NAME`` → the module whose
``main(run: RecipeRun)`` runs it. Modules are named, not imported: a recipe loads torch (and
transformers) only when it runs, and nothing here imports a recipe.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the loop imports torch: only for annotations here
    from _typeshed import DataclassInstance

    from learner.continuous import LearnerPaths
    from learner.lifecycle import LearnerStats
    from streams.serde import AvroCodec

    C = TypeVar("C", bound=DataclassInstance)


@dataclass(frozen=True)
class RecipeRun:
    """One `flywheel learn` run as a recipe's ``main`` sees it: the command's options and what
    the composition root read from the settings (plain values; STYLE rule 3)."""

    config_path: Path | None  # --config; None: the recipe's default file
    model_name: str | None  # --model; None: the recipe's (or its config's) model
    max_versions: int | None
    min_rows: int | None  # --min-rows: loop.min_new_rows
    duration: str | None  # --train-duration: train.duration
    paths: LearnerPaths
    kafka_config: Mapping[str, Any]
    codec: AvroCodec
    stop: threading.Event  # set by SIGINT / SIGTERM (continuous recipes)
    # The metrics endpoint over a learner's stats (model name): a `with` block around the loop.
    serve_metrics: Callable[[LearnerStats, str], AbstractContextManager[object]]
    log: Callable[[str], None]


@dataclass(frozen=True)
class RecipeEntry:
    """A registered recipe."""

    module: str  # defines main(run: RecipeRun); imported when the recipe runs
    runs_model_code: bool  # its eval suite runs model-written programs: needs the sandbox
    continuous: bool  # runs until stopped (SIGINT / SIGTERM finish the step), else once

    def main(self) -> Callable[[RecipeRun], None]:
        main: Callable[[RecipeRun], None] = importlib.import_module(self.module).main
        return main


RECIPES: Mapping[str, RecipeEntry] = MappingProxyType(
    {
        "gate": RecipeEntry("learner.recipes.gate.recipe", runs_model_code=False, continuous=True),
        "agent-sft": RecipeEntry(
            "learner.recipes.agent_sft.recipe", runs_model_code=True, continuous=False
        ),
        "agent": RecipeEntry(
            "learner.recipes.agent_rl.recipe", runs_model_code=True, continuous=True
        ),
        "code-embedder": RecipeEntry(
            "learner.recipes.code_embedder.recipe", runs_model_code=False, continuous=False
        ),
    }
)


def overridden(config: C, run: RecipeRun) -> C:
    """``config`` with the command's overrides, each where the config has the key: --model
    (``model_name``), --min-rows (``loop.min_new_rows``), --train-duration (``train.duration``)."""
    keys = {f.name for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    if run.model_name is not None and "model_name" in keys:
        changes["model_name"] = run.model_name
    if run.min_rows is not None and "loop" in keys:
        loop = config.loop  # type: ignore[attr-defined]  # checked: the config has a loop section
        changes["loop"] = dataclasses.replace(loop, min_new_rows=run.min_rows)
    if run.duration is not None and "train" in keys:
        train = config.train  # type: ignore[attr-defined]  # checked: the config has a train section
        changes["train"] = dataclasses.replace(train, duration=run.duration)
    return dataclasses.replace(config, **changes) if changes else config
