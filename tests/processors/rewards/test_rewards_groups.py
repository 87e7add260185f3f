"""Group-relative advantages of rollouts and when a group is complete."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from fastavro.validation import validate

from processors.rewards.attribution import REWARD_NAMESPACE
from processors.rewards.errors import RewardError
from processors.rewards.groups import GroupPolicy, group_advantages, group_complete
from schemas.catalog import parsed_schema
from schemas.enums import RewardSource
from tests.processors.rewards.reward_events import PRODUCER, T0_MS, at, rollout

ATTRIBUTED_AT = datetime(2026, 1, 1, 1, tzinfo=UTC)
EPS = 1e-6


def test_advantages_known_answer() -> None:
    # The scalar reward is the sum of the components: 1, 0, 0, 1 -> mean 0.5, std 0.5.
    group = [
        rollout("ro-a", {"tests": 0.75, "format": 0.25}),
        rollout("ro-b", {"tests": 0.0}),
        rollout("ro-c", {}),
        rollout("ro-d", {"tests": 1.0}, at_ms=5),
    ]
    out = group_advantages(group, ATTRIBUTED_AT, PRODUCER)
    assert [r.source_id for r in out] == ["ro-a", "ro-b", "ro-c", "ro-d"]
    assert [r.reward for r in out] == [1.0, 0.0, 0.0, 1.0]
    for r, expected in zip(out, [1.0, -1.0, -1.0, 1.0], strict=True):
        assert r.advantage == pytest.approx(expected, abs=1e-5)
    assert dict(out[0].reward_components) == {"tests": 0.75, "format": 0.25}


def test_rollout_rewards_fields_and_schema() -> None:
    out = group_advantages(
        [rollout("ro-a", {"t": 1.0}, at_ms=7), rollout("ro-b", {})], ATTRIBUTED_AT, PRODUCER
    )
    first = out[0]
    assert first.source is RewardSource.ROLLOUT
    assert (first.source_id, first.group_id, first.session_id) == ("ro-a", "g-1", None)
    assert (first.model_name, first.model_version, first.reward_fn) == ("agent", 3, "grpo@1")
    assert (first.decision, first.propensity, first.context) == (None, None, None)
    assert (first.event_time, first.attributed_at) == (at(7), ATTRIBUTED_AT)
    assert first.reward_id == str(uuid.uuid5(REWARD_NAMESPACE, "ro-a:grpo@1"))
    schema = parsed_schema("Reward")
    for r in out:
        assert validate(r.to_record(), schema, raise_errors=True)


def test_singleton_group() -> None:
    (only,) = group_advantages([rollout("ro-a", {"tests": 0.5})], ATTRIBUTED_AT, PRODUCER)
    assert only.advantage == 0.0
    assert only.reward == 0.5
    assert dict(only.reward_components) == {"tests": 0.5, "singleton": 1.0}


def test_all_equal_group_has_zero_advantages() -> None:
    group = [rollout(f"ro-{i}", {"a": 0.1, "b": 0.2}) for i in range(5)]
    out = group_advantages(group, ATTRIBUTED_AT, PRODUCER)
    assert [r.advantage for r in out] == [0.0] * 5
    assert all("singleton" not in r.reward_components for r in out)


def test_duplicates_count_once_and_ids_are_deterministic() -> None:
    group = [rollout("ro-a", {"t": 1.0}), rollout("ro-b", {"t": 0.0}), rollout("ro-a", {"t": 1.0})]
    out = group_advantages(group, ATTRIBUTED_AT, PRODUCER)
    assert [r.source_id for r in out] == ["ro-a", "ro-b"]
    assert [r.advantage for r in out] == pytest.approx([1.0, -1.0], abs=1e-5)
    again = group_advantages(group, ATTRIBUTED_AT, PRODUCER)
    assert [r.reward_id for r in again] == [r.reward_id for r in out]


def test_empty_group() -> None:
    assert group_advantages([], ATTRIBUTED_AT, PRODUCER) == []


@pytest.mark.parametrize(
    ("results", "eps", "match"),
    [
        ([rollout("ro-a", {}), rollout("ro-b", {}, group_id="g-2")], EPS, "groups"),
        ([rollout("ro-a", {"t": float("nan")})], EPS, "finite"),
        ([rollout("ro-a", {})], 0.0, "eps"),
    ],
)
def test_group_advantages_rejects(results: list[object], eps: float, match: str) -> None:
    with pytest.raises(RewardError, match=match):
        group_advantages(results, ATTRIBUTED_AT, PRODUCER, eps=eps)  # type: ignore[arg-type]


def test_group_complete() -> None:
    policy = GroupPolicy(expected_size=3, timeout_ms=1_000)
    two = [rollout("ro-a", {}, at_ms=0), rollout("ro-b", {}, at_ms=500)]
    assert not group_complete([], policy, T0_MS + 10_000)
    assert not group_complete(two, policy, T0_MS + 999)
    assert group_complete(two, policy, T0_MS + 1_000)  # the oldest timed out
    three = [*two, rollout("ro-c", {}, at_ms=600)]
    assert group_complete(three, policy, T0_MS + 600)
    assert not group_complete([*two, two[0]], policy, T0_MS + 600)  # a duplicate is no trial
    # opened when the clock already read T0 + 5 s: its timeout counts from then
    assert not group_complete(two, policy, T0_MS + 5_999, opened_ms=T0_MS + 5_000)
    assert group_complete(two, policy, T0_MS + 6_000, opened_ms=T0_MS + 5_000)


def test_group_policy_rejects_nonsense() -> None:
    with pytest.raises(RewardError, match="expected_size"):
        GroupPolicy(expected_size=0)
