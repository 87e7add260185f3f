"""The staleness bound counts promotions, not version numbers, and versions that were never
production (refused or rolled-back canaries) are never fresh."""

from __future__ import annotations

import pytest

from learner.recipes.agent_rl.recipe import fresh_versions


@pytest.mark.parametrize(
    ("promotions", "production", "k", "fresh"),
    [
        ([1, 2, 6], 6, 2, {1, 2, 6}),  # v3-v5 were refused: v1 is two promotions behind
        ([1, 2, 6], 6, 1, {2, 6}),
        ([1, 2, 6], 6, 0, {6}),
        ([1], 1, 2, {1}),
        ([1, 3, 1], 1, 1, {1, 3}),  # rolled back to v1: v3's trials are one promotion behind
        ([1, 3, 4, 2], 2, 1, {2, 4}),  # production older than the last promoted: v3 is 2 back
        ([1, 2], 2, 2, {1, 2}),  # v3's canary rolled back: its trials (v3 > 2) are stale
        ([], 7, 2, {5, 6, 7}),  # no history read: version numbers, never above production
    ],
)
def test_fresh_versions(promotions: list[int], production: int, k: int, fresh: set[int]) -> None:
    assert fresh_versions(promotions, production, k) == fresh
