"""The seeded bootstrap bounds: the clustered mean resamples clusters, not rows."""

from __future__ import annotations

import numpy as np
import pytest

from learner.bootstrap import clustered_mean_lower, mean_lower


def test_without_clusters_the_clustered_bound_is_the_row_bound() -> None:
    terms = np.random.default_rng(0).random(300)
    assert clustered_mean_lower(terms, None, seed=3) == mean_lower(terms, seed=3)
    singletons = np.asarray([f"c{i}" for i in range(300)], dtype=object)
    assert clustered_mean_lower(terms, singletons, seed=3) == pytest.approx(
        mean_lower(terms, seed=3), abs=0.02
    )


def test_duplicated_tasks_of_a_cluster_widen_the_bound_to_the_clusters_evidence() -> None:
    # 40 programs, each evaluated on 25 tasks with one verdict per program (the tasks of a
    # program agree): 1,000 rows, but only 40 independent outcomes.
    outcomes = (np.random.default_rng(1).random(40) < 0.3).astype(np.float64)
    terms = np.repeat(outcomes, 25)
    clusters = np.repeat(np.asarray([f"p{i}" for i in range(40)], dtype=object), 25)
    rows = mean_lower(terms)  # treats 1,000 rows as independent: too tight
    clustered = clustered_mean_lower(terms, clusters)
    per_program = mean_lower(outcomes)  # the honest bound: one row per program
    assert terms.mean() - rows < 0.05
    assert clustered < rows - 0.05
    assert clustered == pytest.approx(per_program, abs=0.04)


def test_unequal_clusters_weigh_by_their_rows() -> None:
    # one big cluster of passes and many small failing ones: the mean is over rows
    terms = np.concatenate([np.ones(50), np.zeros(50)])
    clusters = np.asarray(["big"] * 50 + [f"s{i}" for i in range(50)], dtype=object)
    bound = clustered_mean_lower(terms, clusters, resamples=2000)
    assert 0.0 <= bound < 0.5 - 0.1  # the big cluster is one draw in 51: often missing
