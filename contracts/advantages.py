"""Advantages, as the reward joiner writes them and the learner trains on them (DESIGN §5).

A group of parallel trials of one task (``grpo@1``, :data:`GROUP_REWARD_FN`): each trial's scalar
reward is normalised within its group, advantage = (r - mean) / (population std + eps)
(:func:`normalised_advantages`). A completion served to a user (``agent_use@1``,
:data:`USE_REWARD_FN`) has no siblings: its group is the window's served completions of the same
model version (:func:`served_advantages`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa

from schemas.enums import RewardSource

GROUP_REWARD_FN = "grpo@1"  # Reward.reward_fn of a rollout trial's group-relative advantage
USE_REWARD_FN = "agent_use@1"  # Reward.reward_fn of a served completion scored by reactions
DEFAULT_GROUP_SIZE = 8  # parallel trials per task: the joiner's group and the rollout workers'


def normalised_advantages(values: Sequence[float], eps: float = 1e-6) -> list[float]:
    """(v - mean) / (population std + eps) within one group; all 0.0 when the values are equal
    or there is one (the learner's in-process studies use the joiner's formula through this)."""
    if len(values) < 2 or min(values) == max(values):
        return [0.0] * len(values)  # no spread: nothing to prefer, and no 0/eps blow-up
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + eps) for v in values]


def served_group_id(version: int) -> str:
    """The group of a served completion of model ``version``: its version's served rows."""
    return f"served/v{version}"


def served_advantages(table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` with each served row's advantage set against its baseline (the window's served
    rows of the same model version, which are also its group) and the rows nobody reacted to
    removed; and how many were removed.

    ``table`` holds Reward rows (columns ``source``, ``reward_components``, ``reward``,
    ``model_version``, ``advantage``, ``group_id``); rows of other sources pass unchanged.
    """
    source = table.column("source").to_pylist()
    served = [i for i, s in enumerate(source) if s == RewardSource.COMPLETION]
    if not served:
        return table, 0
    components = table.column("reward_components").to_pylist()
    reacted = [i for i in served if components[i]]
    reward = table.column("reward").to_pylist()
    version = table.column("model_version").to_pylist()
    advantage = table.column("advantage").to_pylist()
    group = table.column("group_id").to_pylist()
    by_version: dict[int, list[int]] = {}
    for i in reacted:
        by_version.setdefault(version[i], []).append(i)
    for v, members in by_version.items():
        values = normalised_advantages([reward[i] for i in members])
        for i, a in zip(members, values, strict=True):
            advantage[i], group[i] = a, served_group_id(v)
    table = table.set_column(
        table.schema.get_field_index("advantage"), "advantage", pa.array(advantage, pa.float64())
    )
    table = table.set_column(
        table.schema.get_field_index("group_id"), "group_id", pa.array(group, pa.string())
    )
    silent = set(served) - set(reacted)
    if not silent:
        return table, 0
    keep = pa.array([i not in silent for i in range(table.num_rows)])
    return table.filter(keep), len(silent)
