"""simulator.ids: deterministic, valid version-4 UUIDs."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from simulator.ids import IdSource, uuid_strings


@pytest.mark.parametrize("count", [1, 5, 31, 32, 1000])
def test_uuid_strings_are_canonical_version_4(count: int) -> None:
    ids = uuid_strings(np.random.default_rng(3), count)
    assert len(ids) == len(set(ids)) == count
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)


def test_small_and_large_batches_agree() -> None:
    # The two formatting paths turn the same random bytes into the same ids.
    small = uuid_strings(np.random.default_rng(9), 3)
    large = uuid_strings(np.random.default_rng(9), 40)[:3]
    assert small == large


def test_id_source_is_deterministic() -> None:
    a, b = IdSource(np.random.default_rng(1)), IdSource(np.random.default_rng(1))
    first = [a.next() for _ in range(5000)]
    assert first == [b.next() for _ in range(5000)]
    assert len(set(first)) == 5000
    other = IdSource(np.random.default_rng(2))
    assert first != [other.next() for _ in range(5000)]
