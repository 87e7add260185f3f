"""The code embedder's config: the default file spells out the defaults, and ``pairs.packages``
(a short run's sources) is validated and part of the run's digest."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from learner.errors import LearnerError
from learner.recipes.code_embedder.config import DEFAULT_CONFIG, CodeEmbedderConfig, PairsConfig


def test_the_default_file_spells_out_every_default() -> None:
    assert CodeEmbedderConfig.load(DEFAULT_CONFIG) == CodeEmbedderConfig()
    assert "packages: []" in DEFAULT_CONFIG.read_text()


def test_packages_load_as_a_tuple_and_change_the_digest(tmp_path: Path) -> None:
    path = tmp_path / "few.yaml"
    path.write_text("pairs:\n  packages: [json, email]\n")
    config = CodeEmbedderConfig.load(path)
    assert config.pairs.packages == ("json", "email")
    assert config.digest() != CodeEmbedderConfig().digest()
    same = dataclasses.replace(CodeEmbedderConfig(), pairs=PairsConfig(packages=["json", "email"]))
    assert same.digest() == config.digest()  # a list or a tuple: the same run


def test_packages_must_be_a_list_of_names(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("pairs:\n  packages: json\n")
    with pytest.raises(LearnerError, match=r"pairs\.packages must be a list of names"):
        CodeEmbedderConfig.load(path)
