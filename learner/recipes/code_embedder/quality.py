"""Retrieval quality on the held-out packages (bench/index_quality.py and the recipe's metrics):
natural-language queries (docstring first sentences) → their functions (docstring removed)
among every function of those packages. Rankers: BM25 (bm25s, the reference, and the index
client's own, both over ``code_terms``), the dense embedder, and their fusions; the index's
hybrid exactly as a search runs it (``codeindex.client.ranking``). Metrics: MRR@10 and
recall@10 (one relevant function per query).
"""

from __future__ import annotations

import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codeindex.client.lexical import LexicalIndex, term_counts
from codeindex.client.ranking import candidate_count, weighted_fusion
from codeindex.embedding.embedder import Embedder
from codeindex.terms import code_terms
from learner.recipes.code_embedder.pairs import HELD_OUT, first_sentence, functions_of, python_files

K = 10
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al.): 1 / (60 + rank)


@dataclass(frozen=True)
class RetrievalSet:
    corpus: list[str]  # every held-out function's code, docstring removed
    queries: list[str]
    relevant: list[int]  # queries[i]'s function: corpus[relevant[i]]
    packages: dict[str, int]  # functions per held-out package


def held_out_set(site_packages: Path | None = None) -> RetrievalSet:
    """The benchmark set from the held-out packages' own folders in ``site_packages`` (default:
    this environment's). A query whose sentence is shared by several functions is dropped (its
    answer would be ambiguous)."""
    root = site_packages or Path(sysconfig.get_paths()["purelib"])
    corpus: list[str] = []
    documented: list[tuple[str, int]] = []
    packages: dict[str, int] = {}
    for package in HELD_OUT:
        for path in python_files(root / package):
            source = path.read_text(encoding="utf-8", errors="replace")
            for function in functions_of(source, package, str(path.relative_to(root))):
                packages[package] = packages.get(package, 0) + 1
                sentence = first_sentence(function.docstring or "")
                if sentence is not None:
                    documented.append((sentence, len(corpus)))
                corpus.append(function.code)
    counts: dict[str, int] = {}
    for sentence, _ in documented:
        counts[sentence] = counts.get(sentence, 0) + 1
    kept = [(s, i) for s, i in documented if counts[s] == 1]
    return RetrievalSet(corpus, [s for s, _ in kept], [i for _, i in kept], packages)


def bm25_scores(corpus: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """BM25 (Lucene's variant, k1 1.5, b 0.75) scores [queries, corpus] over ``code_terms``."""
    import bm25s

    index = bm25s.BM25()
    index.index([code_terms(text) or ["<empty>"] for text in corpus], show_progress=False)
    vocabulary = index.vocab_dict
    scores = np.zeros((len(queries), len(corpus)), dtype=np.float32)
    for row, query in enumerate(queries):
        terms = [t for t in code_terms(query) if t in vocabulary]
        if terms:
            scores[row] = index.get_scores(terms)
    return scores


def client_bm25_scores(corpus: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """The index client's BM25 (``codeindex.client.lexical``, stdlib) scores [queries, corpus];
    one document per corpus item, as bm25s (the product counts identical chunks once)."""
    index = LexicalIndex({str(i): term_counts(text) for i, text in enumerate(corpus)})
    scores = np.zeros((len(queries), len(corpus)), dtype=np.float32)
    for row, query in enumerate(queries):
        for item, score in index.scores(query).items():
            scores[row, int(item)] = score
    return scores


def dense_scores(
    embedder: Embedder, corpus: Sequence[str], queries: Sequence[str], batch_size: int = 64
) -> np.ndarray:
    """Cosine similarities [queries, corpus] of the embedder's vectors."""
    codes = embedder.encode(corpus, batch_size)
    asked = embedder.encode(queries, batch_size)
    scores: np.ndarray = asked @ codes.T
    return scores


def ranks_of(scores: np.ndarray, relevant: Sequence[int]) -> np.ndarray:
    """1-based rank of each query's relevant item under ``scores`` [queries, corpus] (ties
    count against it: an item scoring the same ranks above it)."""
    target = scores[np.arange(len(relevant)), np.asarray(relevant)]
    ranks: np.ndarray = (scores >= target[:, None]).sum(axis=1)
    return ranks


def reciprocal_rank_fusion(*score_sets: np.ndarray) -> np.ndarray:
    """Fused scores [queries, corpus]: the sum over rankers of 1 / (RRF_K + rank)."""
    fused = np.zeros_like(score_sets[0], dtype=np.float64)
    for scores in score_sets:
        order = np.argsort(-scores, axis=1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, np.arange(1, scores.shape[1] + 1)[None, :], axis=1)
        fused += 1.0 / (RRF_K + ranks)
    return fused


def index_hybrid(
    dense: np.ndarray, lexical: np.ndarray, lexical_weight: float, top_k: int = K
) -> np.ndarray:
    """The index's hybrid as `codeindex.client.search` runs it, scores [queries, corpus]: per
    query the dense top N (at most the server's 100) and the BM25 top N (positive scores),
    N = ``candidate_count(top_k)``, each candidate with both its cosine and its BM25 score,
    fused by ``codeindex.client.ranking.weighted_fusion``; items that are no candidate get
    -inf (ranked after every candidate)."""
    count = candidate_count(top_k)
    dense_count = min(count, 100, dense.shape[1])
    fused = np.full(dense.shape, -np.inf)
    for row in range(dense.shape[0]):
        by_cosine = np.argpartition(-dense[row], dense_count - 1)[:dense_count]
        positive = np.flatnonzero(lexical[row] > 0)
        by_bm25 = positive[np.argsort(-lexical[row, positive], kind="stable")[:count]]
        candidates = set(by_cosine.tolist()) | set(by_bm25.tolist())
        cosines = {i: float(dense[row, i]) for i in candidates}
        bm25 = {i: float(lexical[row, i]) for i in candidates if lexical[row, i] > 0}
        for i, score in weighted_fusion(cosines, bm25, lexical_weight).items():
            fused[row, i] = score
    return fused


def metrics(ranks: np.ndarray, k: int = K) -> dict[str, float]:
    """MRR@k and recall@k of 1-based ranks of the one relevant item."""
    hit = ranks <= k
    return {
        f"mrr@{k}": float(np.where(hit, 1.0 / ranks, 0.0).mean()),
        f"recall@{k}": float(hit.mean()),
    }
