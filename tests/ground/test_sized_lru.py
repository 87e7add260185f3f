"""`ground.sized_lru.SizedLRU`: the budget is the sum of sizes; the least recent goes first."""

from __future__ import annotations

import pytest

from ground.sized_lru import SizedLRU


def test_the_least_recently_used_go_first_until_the_sizes_fit() -> None:
    lru: SizedLRU[str, str] = SizedLRU(10, len)
    for key, value in (("a", "xxxx"), ("b", "xxx"), ("c", "xx")):
        assert lru.put(key, value)
    assert lru.get("a") == "xxxx"  # a is now the most recent: b goes first
    assert lru.put("d", "xxx")
    assert [k for k, _ in lru.items()] == ["c", "a", "d"]
    assert (lru.held, lru.evictions, len(lru)) == (9, 1, 3)


def test_a_replaced_value_frees_its_size_and_an_oversized_one_is_refused() -> None:
    lru: SizedLRU[str, str] = SizedLRU(5, len)
    lru.put("a", "xxxx")
    lru.put("a", "x")
    assert (lru.held, lru.evictions) == (1, 0)
    assert not lru.put("big", "xxxxxx")
    assert lru.get("big") is None and lru.held == 1
    lru.clear()
    assert (lru.held, len(lru)) == (0, 0)
    with pytest.raises(ValueError, match="positive"):
        SizedLRU(0, len)
