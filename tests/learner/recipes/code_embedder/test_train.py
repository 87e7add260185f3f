"""The contrastive objective and a tiny training run."""

from __future__ import annotations

import torch

from learner.recipes.code_embedder.config import ContrastiveConfig
from learner.recipes.code_embedder.train import info_nce, train_contrastive
from tests.codeindex.embedding.tiny import tiny_embedder

WORDS = ["parse", "render", "socket", "cache", "token", "matrix", "email", "image"]
QUERIES = [f"{w} the given value" for w in WORDS] + [f"open a new {w}" for w in WORDS]
CODES = [f"def {w}_value(x):\n    return {w}(x)" for w in WORDS] + [
    f"def open_{w}():\n    return {w.title()}()" for w in WORDS
]


def test_info_nce_is_low_for_aligned_pairs_and_high_for_shuffled_ones() -> None:
    vectors = torch.nn.functional.normalize(torch.randn(8, 16), dim=-1)
    aligned = info_nce(vectors, vectors, 0.05)
    shuffled = info_nce(vectors, vectors.roll(1, dims=0), 0.05)
    assert float(aligned) < 0.1 < float(shuffled)


def _loss(embedder: object) -> float:
    with torch.no_grad():
        q = embedder.forward(*embedder.pad(embedder.tokenize(QUERIES)))  # type: ignore[attr-defined]
        c = embedder.forward(*embedder.pad(embedder.tokenize(CODES)))  # type: ignore[attr-defined]
        return float(info_nce(q, c, 0.05))


def test_a_tiny_training_run_lowers_the_contrastive_loss() -> None:
    embedder = tiny_embedder()
    before = _loss(embedder)
    config = ContrastiveConfig(batch_size=8, duration="60ba", lr=3e-3, warmup_steps=5, threads=1)
    report = train_contrastive(embedder, QUERIES, CODES, config, seed=0)
    assert report.steps == 60 and report.pairs_seen == 480
    assert not embedder.model.training
    assert _loss(embedder) < 0.7 * before
