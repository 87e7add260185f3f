"""The recipe registry (`flywheel learn --recipe NAME`) and the command's config overrides."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path

from learner.continuous import LearnerPaths
from learner.engine.durations import Duration
from learner.recipes import RECIPES, RecipeRun, overridden
from learner.recipes.agent_rl.recipe import AgentRLConfig
from learner.recipes.agent_sft.recipe import AgentSFTConfig
from learner.recipes.gate.config import LearnerConfig
from streams.serde import AvroCodec


def _run(
    model_name: str | None = None, min_rows: int | None = None, duration: str | None = None
) -> RecipeRun:
    return RecipeRun(
        config_path=None,
        model_name=model_name,
        max_versions=None,
        min_rows=min_rows,
        duration=duration,
        paths=LearnerPaths(Path("lake"), Path("mds"), Path("models"), Path("runs")),
        kafka_config={},
        codec=AvroCodec.for_url("http://localhost:1"),
        stop=threading.Event(),
        serve_metrics=lambda _stats, _model: nullcontext(),
        log=lambda _: None,
    )


def test_every_recipe_names_a_module_with_main() -> None:
    assert tuple(RECIPES) == ("gate", "agent-sft", "agent", "code-embedder")  # the CLI's choices
    for entry in RECIPES.values():
        assert callable(entry.main())
    assert {n for n, e in RECIPES.items() if e.runs_model_code} == {"agent", "agent-sft"}
    assert {n for n, e in RECIPES.items() if e.continuous} == {"gate", "agent"}


def test_overrides_apply_where_the_config_has_the_key() -> None:
    run = _run(model_name="other", min_rows=7, duration="5ba")
    gate = overridden(LearnerConfig(), run)  # no model_name key: the gate takes --model itself
    assert gate.loop.min_new_rows == 7 and gate.train.duration == Duration.parse("5ba")
    agent = overridden(AgentRLConfig(), run)
    assert agent.model_name == "other" and agent.loop.min_new_rows == 7
    sft = overridden(AgentSFTConfig(), run)  # no loop: --min-rows does not apply
    assert sft.model_name == "other" and sft.train.duration == Duration.parse("5ba")
    unchanged = LearnerConfig()
    assert overridden(unchanged, _run()) is unchanged
