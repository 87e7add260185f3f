"""The shipped warm-up is what the default config trains on today's corpus: its folder is the
config's digest and its corpus fingerprint is the one the environment plays now (else `make
agent-warm-up` must ship a new one); a changed corpus is not used."""

from __future__ import annotations

from pathlib import Path

from environments import ENVIRONMENTS
from learner.eval_suite import load_evals
from learner.recipes.agent_sft.recipe import AgentSFTConfig
from learner.recipes.agent_sft.shipped import (
    META,
    SHIPPED_ROOT,
    corpus_fingerprint,
    find_shipped,
    ship,
)


def test_the_default_configs_shipped_warm_up_matches_todays_corpus() -> None:
    config = AgentSFTConfig.load()
    environment = ENVIRONMENTS.get_any(config.environment)
    tasks = environment.tasks("train", config.corpus.tasks, seed=config.corpus.seed)
    fingerprint = corpus_fingerprint(environment, tasks)
    shipped = find_shipped(config.digest(), fingerprint)
    assert shipped is not None, (
        f"no shipped warm-up for config {config.digest()} and corpus {fingerprint[:12]} under "
        f"{SHIPPED_ROOT}: run `make agent-warm-up` and commit it"
    )
    assert shipped.meta["digest"] == config.digest() and shipped.meta["train_tokens"] > 0
    assert (shipped.checkpoint / "model.safetensors").is_file()
    kept = load_evals(shipped.checkpoint, config.eval)  # the demo's first minutes go to RL
    assert kept is not None and kept[0].pass_at_1 == shipped.meta["eval_pass_at_1"]
    assert [p.name for p in SHIPPED_ROOT.iterdir()] == [config.digest()]  # only the current one


def test_another_corpus_or_config_is_not_taken(tmp_path: Path) -> None:
    checkpoint = tmp_path / "hf"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    ship("abc123", checkpoint, {"fingerprint": "f1", "train_tokens": 1}, root=tmp_path / "ship")
    assert find_shipped("abc123", "f1", root=tmp_path / "ship") is not None
    assert find_shipped("abc123", "f2", root=tmp_path / "ship") is None  # the corpus changed
    assert find_shipped("other", "f1", root=tmp_path / "ship") is None  # the config changed
    (tmp_path / "ship" / "abc123" / META).write_text("not json")
    assert find_shipped("abc123", "f1", root=tmp_path / "ship") is None
