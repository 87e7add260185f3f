"""The hybrid's fusion: weights, the BM25 scale, missing sides, candidate counts."""

from __future__ import annotations

import pytest

from codeindex.client.ranking import candidate_count, top, weighted_fusion


def test_weighted_fusion_scales_bm25_by_its_best_score() -> None:
    dense = {"a": 0.9, "b": 0.8, "c": 0.1}
    lexical = {"b": 5.0, "c": 4.0, "d": 2.0}  # "d": a BM25 candidate with no cosine given
    fused = weighted_fusion(dense, lexical)
    assert fused == pytest.approx({"a": 0.45, "b": 0.9, "c": 0.45, "d": 0.2})
    assert weighted_fusion(dense, lexical, 0.0) == pytest.approx({**dense, "d": 0.0})
    assert weighted_fusion(dense, lexical, 1.0) == pytest.approx(
        {"a": 0.0, "b": 1.0, "c": 0.8, "d": 0.4}
    )
    # No positive BM25 score: the lexical term is 0, the ranking is the dense one.
    assert weighted_fusion(dense, {"a": 0.0}, 0.5) == pytest.approx(
        {"a": 0.45, "b": 0.4, "c": 0.05}
    )
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        weighted_fusion(dense, lexical, 1.5)


def test_candidates_and_top() -> None:
    assert [candidate_count(k) for k in (1, 10, 11, 100)] == [50, 50, 55, 500]
    assert top({"x": 1.0, "y": 3.0, "z": 1.0, "w": 2.0}, 3) == ["y", "w", "x"]  # ties in order
    assert top({}, 5) == []
