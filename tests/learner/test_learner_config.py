"""Every learner config file loads into the typed sections; mistakes name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.engine.durations import Duration
from learner.errors import LearnerError
from learner.recipes.gate.config import DEFAULT_CONFIG_PATH, LearnerConfig

CONFIGS = sorted(DEFAULT_CONFIG_PATH.parent.glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_file_loads(path: Path) -> None:
    config = LearnerConfig.load(path)
    assert config.reward_fn and config.train.batch_size >= 1


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
