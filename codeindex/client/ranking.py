"""The index's hybrid ranking: the server's cosine similarity (dense) fused with the client's
BM25 (lexical; only the client holds the code, so only it can score terms: docs/index.md,
"Search"). One implementation for the product (`codeindex.client.search`) and the benchmark
(`bench/index_quality.py`), so the benchmark measures what a search does. Stdlib only.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# Equal shares of cosine and scaled BM25, fixed before measuring (not tuned on the benchmark).
LEXICAL_WEIGHT = 0.5
MIN_CANDIDATES = 50


def candidate_count(top_k: int) -> int:
    """How many candidates each ranker proposes for a search of `top_k`: max(50, 5 x top_k),
    so that what one ranker puts at rank 50 can still reach the top 10 after fusion."""
    return max(MIN_CANDIDATES, 5 * top_k)


def weighted_fusion(
    dense: Mapping[K, float], lexical: Mapping[K, float], lexical_weight: float = LEXICAL_WEIGHT
) -> dict[K, float]:
    """The fused score of every key of `dense` or `lexical`:
    ``(1 - w) x cosine + w x bm25 / best``, where ``w`` is `lexical_weight` (0: dense only, 1:
    lexical only) and ``best`` the highest score in `lexical` (the query's best BM25 score when
    `lexical` holds the BM25 top candidates), so both terms lie on comparable scales (a cosine
    is at most 1, a scaled BM25 within [0, 1]). A key missing from one side scores 0 there; with
    no positive BM25 score the lexical term is 0. ValueError if `lexical_weight` is not within
    0..1."""
    if not 0.0 <= lexical_weight <= 1.0:
        raise ValueError(f"lexical_weight must be within 0..1, not {lexical_weight}")
    best = max(lexical.values(), default=0.0)
    scale = lexical_weight / best if best > 0 else 0.0
    dense_weight = 1.0 - lexical_weight
    fused = {key: dense_weight * score for key, score in dense.items()}
    for key, score in lexical.items():
        fused[key] = fused.get(key, 0.0) + scale * score
    return fused


def top(scores: Mapping[K, float], n: int) -> list[K]:
    """The `n` keys of highest score, best first (ties in the mapping's order)."""
    return heapq.nlargest(n, scores, key=scores.__getitem__)
