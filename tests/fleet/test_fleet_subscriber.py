"""Serving without a broker: the serving snapshot."""

from __future__ import annotations

from fleet.subscriber import ServingSnapshot
from schemas.enums import Channel


def test_empty_snapshot_serves_nothing_on_either_channel() -> None:
    snapshot: ServingSnapshot[str] = ServingSnapshot()
    assert snapshot.on(Channel.PRODUCTION) is None and snapshot.on(Channel.CANARY) is None
