"""The holdout split: a fixed function of the id, the same per id and in bulk, pinned values."""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pyarrow as pa
import pytest

from learner.errors import LearnerError
from learner.recipes.gate.holdout import HoldoutSplit, _hash_scalar, _mix_scalar

# mix64(fnv64("flywheel-holdout@1:" + id)) of the first implementation: the split of every
# deployed window depends on these, so they never change.
PINNED = {
    "": 3542707803580889139,
    "a": 10236573633853402578,
    "é": 5752877383524358934,
    "日本語": 5856874799158609925,
    "🚀x": 17657005067697482455,
    "suggestion-1": 5268521177767630787,
    "00000000-0000-0000-0000-000000000007": 11239104608824997898,
    "x" * 100: 7460502837260787221,
    "ß" * 13: 17441835636321908360,
    "null\0byte": 12792907303775333597,
}
# sha256 of np.packbits(mask) over 50,000 UUIDs (seed 0) computed by the first implementation.
PINNED_UUID_MASK = "e1994b1b68f30b3d23ee4257304586e3e59e3d3a9cf1a63426a4c59614ba3f1c"


def _random_ids(n: int, seed: int) -> list[str]:
    """Ids of 0..40 characters from ASCII, Latin-1, CJK and astral planes (1-4 UTF-8 bytes)."""
    rng = np.random.default_rng(seed)
    ranges = [(0x20, 0x7F), (0xA0, 0x250), (0x4E00, 0x9FFF), (0x1F300, 0x1F64F)]
    ids = []
    for _ in range(n):
        low, high = ranges[int(rng.integers(len(ranges)))]
        codes = rng.integers(low, high, size=int(rng.integers(0, 41)))
        ids.append("".join(map(chr, codes)))
    return ids


def test_hash_values_are_pinned() -> None:
    salt = HoldoutSplit().salt
    for source_id, value in PINNED.items():
        assert _mix_scalar(_hash_scalar(f"{salt}:{source_id}".encode())) == value


def test_bulk_mask_equals_the_per_id_split_on_unicode_ids_of_every_length() -> None:
    for split in (HoldoutSplit(), HoldoutSplit(0.5, salt="a longer salt, not word-aligned")):
        ids = _random_ids(3000, seed=len(split.salt)) + list(PINNED)
        mask = split.mask(pa.array(ids))
        assert mask.tolist() == [split.is_held_out(i) for i in ids]


def test_bulk_mask_handles_nulls_chunks_slices_and_large_strings() -> None:
    split = HoldoutSplit(0.4)
    ids: list[str | None] = [*_random_ids(500, seed=3), None, "", None]
    expected = [i is not None and split.is_held_out(i) for i in ids]
    chunked = pa.chunked_array([pa.array(ids[:200]), pa.array(ids[200:])])
    assert split.mask(chunked).tolist() == expected
    assert split.mask(pa.array(ids, pa.large_string())).tolist() == expected
    assert split.mask(pa.array(ids).slice(7, 300)).tolist() == expected[7:307]
    assert split.mask(pa.array([], pa.string())).tolist() == []


def test_bulk_mask_of_uuids_is_pinned_and_holds_out_the_fraction() -> None:
    rng = np.random.default_rng(0)
    ids = [str(uuid.UUID(int=int(i))) for i in rng.integers(2**62, size=50_000)]
    mask = HoldoutSplit().mask(pa.array(ids))
    assert hashlib.sha256(np.packbits(mask).tobytes()).hexdigest() == PINNED_UUID_MASK
    assert 0.19 < mask.mean() < 0.21


def test_fraction_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(LearnerError, match=r"holdout\.fraction"):
        HoldoutSplit(1.0)
