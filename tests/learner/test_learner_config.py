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
from learner.recipes.agent_rl.recipe import DEFAULT_AGENT_CONFIG, AgentRLConfig
from learner.recipes.agent_sft.recipe import AgentSFTConfig
from learner.recipes.code_embedder.config import CodeEmbedderConfig
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig

RECIPES_DIR = Path(__file__).parents[2] / "learner" / "recipes"
LOADERS: dict[str, Callable[[Path], object]] = {  # recipe folder -> its config's loader
    "gate": LearnerConfig.load,
    "agent_sft": AgentSFTConfig.load,
    "agent_rl": AgentRLConfig.load,
    "code_embedder": CodeEmbedderConfig.load,
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
    path.write_text("train:\n  duration: 90s\nrelease_check:\n  tolerance: 0.01\n")
    config = LearnerConfig.load(path)
    assert config.train.duration == Duration.parse("90s") and config.release_check.tolerance == 0.01
    assert config.canary == LearnerConfig().canary


@pytest.mark.parametrize("cls", [LearnerConfig, AgentRLConfig])
def test_the_old_gate_section_still_loads_as_release_check(
    tmp_path: Path, cls: type[LearnerConfig] | type[AgentRLConfig]
) -> None:
    """``gate:`` is the documented old name of ``release_check:`` (users' files keep loading)."""
    section = "  tolerance: 0.01\n  min_lift: 0.5\n  seed: 3\n"
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(f"gate:\n{section}")
    new.write_text(f"release_check:\n{section}")
    config = cls.load(old)
    assert config == cls.load(new) and config.release_check.min_lift == 0.5
    assert config.release_check != cls().release_check


def test_the_shipped_configs_use_the_new_section_name() -> None:
    assert "release_check:" in DEFAULT_AGENT_CONFIG.read_text()
    assert "release_check:" in DEFAULT_CONFIG_PATH.read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trian:\n  lr: 0.1\n", "unknown key"),
        ("train:\n  learning_rate: 0.1\n", "train: unknown key"),
        ("train: 5\n", "train must be a mapping"),
        ("holdout:\n  fraction: 2\n", "holdout fraction"),
        ("- a\n- b\n", "mapping of sections"),
        ("gate:\n  seed: 1\nrelease_check:\n  seed: 2\n", "gate is the old name of release_check"),
        ("gate:\n  tolernce: 0.1\n", "release_check: unknown key"),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(LearnerError, match=message):
        LearnerConfig.load(path)
