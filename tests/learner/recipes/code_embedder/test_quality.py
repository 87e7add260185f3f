"""The benchmark's metrics, BM25 and fusion on small hand-made score tables."""

from __future__ import annotations

import numpy as np

from learner.recipes.code_embedder import quality


def test_ranks_and_metrics() -> None:
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.3, 0.1], [0.4, 0.4, 0.4]])
    ranks = quality.ranks_of(scores, [0, 0, 1])
    assert ranks.tolist() == [1, 2, 3]  # a tie counts against the relevant item
    m = quality.metrics(ranks, k=2)
    assert m["mrr@2"] == (1 + 0.5 + 0) / 3 and m["recall@2"] == 2 / 3


def test_bm25_ranks_the_matching_function_first() -> None:
    corpus = [
        "def read_json_file(path): return json.load(open(path))",
        "def send_email(to, body): smtp.send(to, body)",
        "def resize_image(img, size): return img.resize(size)",
    ]
    scores = quality.bm25_scores(corpus, ["Resize an image", "Read a JSON file", "zzz"])
    assert scores.shape == (3, 3)
    assert scores[0].argmax() == 2 and scores[1].argmax() == 0 and not scores[2].any()


def test_fusions_combine_both_rankers() -> None:
    dense = np.array([[0.9, 0.8, 0.1]])
    lexical = np.array([[0.0, 5.0, 4.0]])
    rrf = quality.reciprocal_rank_fusion(dense, lexical)
    assert rrf[0].argmax() == 1  # second by dense, first by BM25: best overall
    weighted = quality.index_hybrid(dense, lexical, 0.5)
    np.testing.assert_allclose(weighted, [[0.45, 0.9, 0.45]])


def test_the_index_hybrid_fuses_only_the_candidates_of_either_ranker() -> None:
    # 60 items: dense prefers the first 50, BM25 only item 59; the rest is no candidate.
    dense = np.linspace(0.9, 0.0, 60)[None, :]
    lexical = np.zeros((1, 60))
    lexical[0, 59] = 3.0
    fused = quality.index_hybrid(dense, lexical, 0.5)
    assert np.isinf(fused[0, 50:59]).all() and fused[0, 59] == 0.5 + 0.5 * dense[0, 59]
    np.testing.assert_allclose(fused[0, :50], 0.5 * dense[0, :50])
    assert quality.ranks_of(fused, [59]).tolist() == [1]


def test_the_client_bm25_equals_bm25s() -> None:
    corpus = ["def read_json(path): return json.load(path)", "def send_mail(to): smtp(to)",
              "JSON = 1  # json"]  # fmt: skip
    queries = ["read json", "mail to", "zzz"]
    np.testing.assert_allclose(
        quality.client_bm25_scores(corpus, queries), quality.bm25_scores(corpus, queries),
        rtol=1e-5,
    )  # fmt: skip
