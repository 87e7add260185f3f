"""Every config file of every learner recipe loads into its typed sections (STYLE rule 4: one
test for all of them, found by folder, so a new recipe's or variant's file is checked too);
mistakes name the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from learner.engine.durations import Duration
from learner.errors import LearnerError
from learner.recipes import RECIPES
from learner.recipes.agent_rl.recipe import AgentRLConfig
from learner.recipes.agent_sft.recipe import AgentSFTConfig
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig

RECIPES_DIR = Path(__file__).parents[2] / "learner" / "recipes"
LOADERS: dict[str, Callable[[Path], object]] = {  # recipe folder -> its config's loader
    "gate": LearnerConfig.load,
    "agent_sft": AgentSFTConfig.load,
    "agent_rl": AgentRLConfig.load,
}
CONFIGS = sorted(RECIPES_DIR.glob("*/configs/*.yaml"))


def test_every_registered_recipe_has_a_loader_and_a_default_file() -> None:
    folders = {entry.module.split(".")[2] for entry in RECIPES.values()}
    assert folders == set(LOADERS)  # a new recipe folder needs its loader here
    assert {path.parent.parent.name for path in CONFIGS} == folders


@pytest.mark.parametrize("path", CONFIGS, ids=[f"{p.parent.parent.name}/{p.name}" for p in CONFIGS])
def test_every_config_file_loads(path: Path) -> None:
    config = LOADERS[path.parent.parent.name](path)
    train = getattr(config, "train")  # noqa: B009  # every recipe's config has a train section
    assert train.batch_size >= 1


def test_the_default_file_spells_out_every_default() -> None:
    assert LearnerConfig.load(DEFAULT_CONFIG_PATH) == LearnerConfig()


def test_a_partial_file_keeps_the_other_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("train:\n  duration: 90s\ngate:\n  tolerance: 0.01\n")
    config = LearnerConfig.load(path)
    assert config.train.duration == Duration.parse("90s") and config.gate.tolerance == 0.01
    assert config.canary == LearnerConfig().canary


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trian:\n  lr: 0.1\n", "unknown key"),
        ("train:\n  learning_rate: 0.1\n", "train: unknown key"),
        ("train: 5\n", "train must be a mapping"),
        ("holdout:\n  fraction: 2\n", "holdout fraction"),
        ("- a\n- b\n", "mapping of sections"),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(LearnerError, match=message):
        LearnerConfig.load(path)
