"""The staleness bound counts promotions, not version numbers."""

from __future__ import annotations

import pytest

from learner.agent_loop import oldest_fresh_version


@pytest.mark.parametrize(
    ("promotions", "production", "k", "oldest"),
    [
        ([1, 2, 6], 6, 2, 1),  # v3-v5 were refused: v1 is two promotions behind, not five
        ([1, 2, 6], 6, 1, 2),
        ([1, 2, 6], 6, 0, 6),
        ([1], 1, 2, 1),
        ([1, 3, 1], 1, 1, 1),  # rolled back to v1: v3's trials are one promotion behind
        ([1, 3, 4, 2], 2, 1, 2),  # production older than the last promoted: min of the span
        ([], 7, 2, 5),  # no history read: version numbers, the old bound
    ],
)
def test_oldest_fresh_version(promotions: list[int], production: int, k: int, oldest: int) -> None:
    assert oldest_fresh_version(promotions, production, k) == oldest
