"""Serving without a broker: the stable canary bucket."""

from __future__ import annotations

from fleet.subscriber import ServingSnapshot, canary_bucket
from schemas.enums import Channel


def test_canary_bucket_is_stable_uniform_and_per_model() -> None:
    users = [f"user-{i}" for i in range(20_000)]
    buckets = [canary_bucket("gate", u) for u in users]
    assert buckets == [canary_bucket("gate", u) for u in users]
    assert all(0.0 <= b < 1.0 for b in buckets)
    for fraction in (0.05, 0.1, 0.5):
        share = sum(b < fraction for b in buckets) / len(buckets)
        assert abs(share - fraction) < 0.01
    other = [canary_bucket("other-model", u) for u in users[:100]]
    assert other != buckets[:100]
    # A larger canary keeps the users a smaller one had.
    small = {u for u, b in zip(users, buckets, strict=True) if b < 0.1}
    large = {u for u, b in zip(users, buckets, strict=True) if b < 0.2}
    assert small < large


def test_empty_snapshot_serves_nothing_on_either_channel() -> None:
    snapshot: ServingSnapshot[str] = ServingSnapshot()
    assert snapshot.on(Channel.PRODUCTION) is None and snapshot.on(Channel.CANARY) is None
