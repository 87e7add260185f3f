"""Group-relative advantages of agent rollouts, as in GRPO (DESIGN §5).

Parallel trials of one task share a ``group_id``. Once a group is complete (:func:`group_complete`)
each trial's scalar reward is normalised within the group: advantage = (r - mean) / (std + eps),
population std. The scalar reward of a trial is the sum of its ``reward_components`` (the
agent harness already weighs them; e.g. ``{"tests": 0.75, "format": 0.1}`` → 0.85).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from contracts.advantages import DEFAULT_GROUP_SIZE, GROUP_REWARD_FN, normalised_advantages
from processors.rewards.attribution import check_aware, reward_id
from processors.rewards.errors import RewardError
from schemas.enums import RewardSource
from schemas.events import Reward, RolloutResult
from schemas.records import encode_time


@dataclass(frozen=True)
class GroupPolicy:
    """When a rollout group is complete: ``expected_size`` distinct trials have arrived, or the
    oldest is ``timeout_ms`` old (event time). Raises :class:`RewardError` for values < 1."""

    expected_size: int = DEFAULT_GROUP_SIZE
    timeout_ms: int = 120_000

    def __post_init__(self) -> None:
        if self.expected_size < 1 or self.timeout_ms < 1:
            raise RewardError(
                f"GroupPolicy needs expected_size >= 1 and timeout_ms >= 1, got "
                f"expected_size={self.expected_size}, timeout_ms={self.timeout_ms}"
            )


def group_complete(
    results: Sequence[RolloutResult], policy: GroupPolicy, now_ms: int, opened_ms: int = 0
) -> bool:
    """True when the group has ``policy.expected_size`` distinct rollout ids, or ``now_ms`` is
    at least ``policy.timeout_ms`` past its oldest result's event time and past ``opened_ms``
    (the clock's value when the group opened: a clock that another producer's events already
    pushed ahead must not time a new group out at once). False for no results."""
    if not results:
        return False
    if len({r.rollout_id for r in results}) >= policy.expected_size:
        return True
    oldest_ms = min(encode_time(r.event_time) for r in results)
    return now_ms - max(oldest_ms, opened_ms) >= policy.timeout_ms


def scalar_reward(result: RolloutResult) -> float:
    """The trial's scalar reward: the sum of its reward_components (0.0 when it has none).

    Raises :class:`RewardError` when a component is NaN or infinite.
    """
    value = math.fsum(result.reward_components.values())
    if not math.isfinite(value):
        raise RewardError(
            f"rollout {result.rollout_id}: reward_components {dict(result.reward_components)} "
            "are not all finite; fix the agent harness that scored it."
        )
    return value


def _distinct(results: Sequence[RolloutResult]) -> list[RolloutResult]:
    # A redelivered trial must not count twice in the mean; keep its earliest copy.
    chosen: dict[str, RolloutResult] = {}
    for r in results:
        kept = chosen.get(r.rollout_id)
        if kept is None or (r.event_time, r.event_id) < (kept.event_time, kept.event_id):
            chosen[r.rollout_id] = r
    return list(chosen.values())


def group_advantages(
    results: Sequence[RolloutResult],
    attributed_at: datetime,
    producer: str,
    eps: float = 1e-6,
) -> list[Reward]:
    """One ROLLOUT :class:`Reward` (``reward_fn`` "grpo@1") per distinct trial of one group.

    ``reward`` is the trial's :func:`scalar_reward`, ``advantage`` its group-relative advantage.
    A singleton group gets advantage 0.0 and the extra component ``singleton=1``; a group whose
    rewards are all equal gets 0.0 for all. Duplicate rollout ids count once (earliest copy).
    Returns [] for no results. Raises :class:`RewardError` when the results span several
    group_ids, a reward is not finite, ``eps`` <= 0 or ``attributed_at`` is naive.
    """
    if not results:
        return []
    if eps <= 0:
        raise RewardError(f"eps must be > 0 (it keeps the division finite), got {eps}")
    check_aware(attributed_at)
    groups = sorted({r.group_id for r in results})
    if len(groups) > 1:
        raise RewardError(f"results span groups {groups}; normalise one group_id at a time")
    trials = _distinct(results)
    values = [scalar_reward(r) for r in trials]
    advantages = normalised_advantages(values, eps)
    singleton = len(trials) == 1
    return [
        Reward(
            event_time=r.event_time,
            producer=producer,
            reward_id=reward_id(r.rollout_id, GROUP_REWARD_FN),
            source=RewardSource.ROLLOUT,
            source_id=r.rollout_id,
            session_id=None,
            group_id=r.group_id,
            model_name=r.model_name,
            model_version=r.model_version,
            reward=value,
            reward_components={**r.reward_components, **({"singleton": 1.0} if singleton else {})},
            reward_fn=GROUP_REWARD_FN,
            advantage=advantage,
            attributed_at=attributed_at,
        )
        for r, value, advantage in zip(trials, values, advantages, strict=True)
    ]
