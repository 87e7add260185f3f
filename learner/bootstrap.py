"""Seeded percentile bootstrap: the confidence bounds both release checks use (the gate's
off-policy comparison, learner.recipes.gate.ope; the agent's eval suite comparison,
learner.recipes.agent_rl.eval_check).

A ``statistic`` takes a (b, n) matrix of resampled row indices and returns (b,) values; rows may
be clusters (:func:`cluster_sums`) so that correlated rows are resampled together.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from learner.errors import LearnerError

DEFAULT_CONFIDENCE = 0.95
DEFAULT_BOOTSTRAP = 1000
_CHUNK = 64  # bootstrap resamples gathered at once: bounds memory at _CHUNK * n floats


def bootstrap_lower(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> float:
    """One-sided lower percentile bound of a statistic of n rows.

    ``statistic`` takes a (b, n) matrix of resampled row indices and returns (b,) values. The
    bound is the (1 - confidence) quantile of ``resamples`` values (seeded, reproducible).
    """
    _check_bootstrap(confidence, resamples, n)
    return float(np.quantile(_resampled(statistic, n, resamples, seed), 1.0 - confidence))


def _resampled(
    statistic: Callable[[np.ndarray], np.ndarray], n: int, resamples: int, seed: int
) -> np.ndarray:
    """(resamples,) values of ``statistic`` on seeded bootstrap resamples of n rows."""
    rng = np.random.default_rng(seed)
    values = []
    for start in range(0, resamples, _CHUNK):
        b = min(_CHUNK, resamples - start)
        values.append(statistic(rng.integers(0, n, size=(b, n))))
    return np.concatenate(values)


def bootstrap_interval(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float]:
    """Two-sided percentile interval at ``confidence`` (arguments as :func:`bootstrap_lower`)."""
    _check_bootstrap(confidence, resamples, n)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(_resampled(statistic, n, resamples, seed), [tail, 1.0 - tail])
    return float(low), float(high)


def _check_bootstrap(confidence: float, resamples: int, n: int) -> None:
    if not 0.5 <= confidence < 1.0 or resamples < 1 or n < 1:
        raise LearnerError(
            f"bootstrap needs confidence in [0.5, 1) (got {confidence}), resamples >= 1 (got "
            f"{resamples}) and rows (got {n})."
        )


def mean_lower(
    terms: np.ndarray,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> float:
    """Bootstrap lower bound on mean(terms) (arguments as :func:`bootstrap_lower`)."""
    return bootstrap_lower(
        lambda idx: np.asarray(terms[idx].mean(axis=1)),
        len(terms),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )


def clustered_mean_lower(
    terms: np.ndarray,
    clusters: np.ndarray | None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> float:
    """Bootstrap lower bound on mean(terms) when rows of one cluster are not independent (tasks
    of one program): clusters are resampled with replacement and the statistic is the mean over
    the rows they bring (sum of terms / rows). ``clusters`` (n,) holds each row's cluster id
    (None: a cluster of its own); without it this is :func:`mean_lower`'s row bootstrap.
    Other arguments as :func:`bootstrap_lower`."""
    sums = cluster_sums(clusters, np.asarray(terms, dtype=np.float64))  # (k, 2): rows, sum

    def mean(idx: np.ndarray) -> np.ndarray:
        picked = sums[idx]  # (b, k, 2)
        return np.asarray(picked[..., 1].sum(axis=1) / picked[..., 0].sum(axis=1))

    return bootstrap_lower(mean, len(sums), confidence=confidence, resamples=resamples, seed=seed)


def cluster_sums(clusters: np.ndarray | None, *columns: np.ndarray) -> np.ndarray:
    """(k, 1 + len(columns)): per cluster its row count and the sums of ``columns`` (n,);
    rows of cluster None (unknown user) are each a cluster of their own. Without ``clusters``
    every row is one (k = n), and a bootstrap over them is the plain row bootstrap."""
    stacked = np.stack([np.ones(len(columns[0])), *columns], axis=1)
    if clusters is None:
        return stacked
    keys = np.asarray([f"\x00row{i}" if c is None else str(c) for i, c in enumerate(clusters)])
    _, index = np.unique(keys, return_inverse=True)
    sums = np.zeros((int(index.max()) + 1, stacked.shape[1]))
    np.add.at(sums, index, stacked)
    return sums
