"""Reward records for the feature store's tests, and a real lake written from them."""

from __future__ import annotations

import random
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from contracts.lake_layout import file_path, hour_of_ms
from feature_store.semantics import from_epoch_ms
from processors.lake.columns import LakeColumns
from schemas.catalog import load_schema
from schemas.enums import Decision, RewardSource
from schemas.events import Reward

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


def reward(
    t_ms: int,
    *,
    user: str | None = "user:a",
    repo: str | None = "repo:x",
    language: str | None = "python",
    model_version: int = 1,
    shown: bool | None = True,
    accepted: bool = False,
    reward_fn: str = "tab@1",
    source: RewardSource = RewardSource.SUGGESTION,
    value: float | None = None,
) -> dict[str, Any]:
    """One Reward as the dict the codec encodes (event_time in epoch ms)."""
    decision = None if shown is None else (Decision.SHOWN if shown else Decision.SUPPRESSED)
    components = {"shown": float(bool(shown)), "accepted": float(bool(shown) and accepted)}
    if reward_fn == "tests@1":
        components = {"tab": 0.0, "tests": 0.0}  # no `accepted` component
    if value is None:
        value = 0.0 if not shown else (0.75 if accepted else -0.25)
    return Reward(
        event_time=from_epoch_ms(t_ms),
        producer="tests/feature-store",
        reward_id=f"r-{t_ms}-{random.random()}",
        source=source,
        source_id="s",
        session_id="sess",
        user_id=user,
        repo_id=repo,
        model_name="suggestion-gate",
        model_version=model_version,
        decision=decision,
        language=language,
        reward=value,
        reward_components=components,
        reward_fn=reward_fn,
        attributed_at=from_epoch_ms(t_ms),
    ).to_record()


def random_rewards(rng: random.Random, n: int, span_ms: int, step_ms: int) -> list[dict[str, Any]]:
    """``n`` rewards over ``span_ms`` at multiples of ``step_ms`` (so many share a timestamp),
    mixing users, repos, languages, versions, decisions, other reward functions, rollouts and
    null keys."""
    out = []
    for _ in range(n):
        t = T0_MS + rng.randrange(0, span_ms // step_ms) * step_ms
        kind = rng.random()
        out.append(
            reward(
                t,
                user=rng.choice(["user:a", "user:b", "user:c", "user:d", None]),
                repo=rng.choice(["repo:x", "repo:y", None]),
                language=rng.choice(["python", "go", None]),
                model_version=rng.choice([1, 2]),
                shown=rng.random() < 0.7,
                accepted=rng.random() < 0.4,
                reward_fn="tab@1" if kind < 0.8 else ("survival@1" if kind < 0.9 else "tests@1"),
                source=RewardSource.ROLLOUT if rng.random() < 0.05 else RewardSource.SUGGESTION,
            )
        )
    return out


def write_lake(lake: Path, records: Iterable[Mapping[str, Any]], topic: str = "rewards") -> int:
    """Write ``records`` as the lake sink would: per (partition, hour) a file named by its offset
    range in ``<lake>/<topic>/dt=…/hour=…/``. Partition = index % 2; returns files written."""
    columns = LakeColumns(load_schema("Reward"))
    groups: dict[tuple[int, int], list[tuple[int, Mapping[str, Any]]]] = defaultdict(list)
    next_offset = [0, 0]
    for index, record in enumerate(records):
        partition = index % 2
        groups[(partition, hour_of_ms(int(record["event_time"])))].append(
            (next_offset[partition], record)
        )
        next_offset[partition] += 1
    for (partition, hour), items in groups.items():
        offsets = array("q", [o for o, _ in items])
        table = columns.table([columns.row(r) for _, r in items], topic, partition, offsets)
        path = file_path(lake, topic, partition, offsets[0], offsets[-1], hour)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    return len(groups)
