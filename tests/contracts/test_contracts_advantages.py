"""Advantages: the group formula and the served completions' per-version baseline."""

from __future__ import annotations

import pyarrow as pa
import pytest

from contracts.advantages import normalised_advantages, served_advantages, served_group_id


def test_normalised_advantages_known_answer() -> None:
    # 1, 0, 0, 1 -> mean 0.5, population std 0.5.
    out = normalised_advantages([1.0, 0.0, 0.0, 1.0])
    assert out == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)


@pytest.mark.parametrize("values", [[], [0.5], [0.3, 0.3, 0.3]])
def test_no_spread_means_zero_advantages(values: list[float]) -> None:
    assert normalised_advantages(values) == [0.0] * len(values)


def _rewards(rows: list[tuple[str, dict[str, float], float, int, float, str]]) -> pa.Table:
    source, components, reward, version, advantage, group = zip(*rows, strict=True)
    return pa.table({
        "source": pa.array(source, pa.string()),
        "reward_components": pa.array(components, pa.map_(pa.string(), pa.float64())),
        "reward": pa.array(reward, pa.float64()),
        "model_version": pa.array(version, pa.int64()),
        "advantage": pa.array(advantage, pa.float64()),
        "group_id": pa.array(group, pa.string()),
    })  # fmt: skip


def test_served_rows_are_normalised_per_version_and_silent_ones_dropped() -> None:
    table = _rewards([
        ("ROLLOUT", {"tests": 1.0}, 1.0, 4, 0.7, "g-1"),
        ("COMPLETION", {"accepted": 1.0}, 1.0, 4, 0.0, ""),
        ("COMPLETION", {"reverted": -1.0}, -1.0, 4, 0.0, ""),
        ("COMPLETION", {}, 0.0, 4, 0.0, ""),  # nobody reacted: no signal
        ("COMPLETION", {"accepted": 1.0}, 1.0, 5, 0.0, ""),  # alone in its version
    ])  # fmt: skip
    out, removed = served_advantages(table)
    assert removed == 1
    assert out.column("source").to_pylist() == ["ROLLOUT"] + ["COMPLETION"] * 3
    assert out.column("advantage").to_pylist() == pytest.approx([0.7, 1.0, -1.0, 0.0], abs=1e-5)
    assert out.column("group_id").to_pylist() == [
        "g-1", served_group_id(4), served_group_id(4), served_group_id(5)
    ]  # fmt: skip
    assert served_group_id(4) == "served/v4"


def test_a_table_without_served_rows_is_unchanged() -> None:
    table = _rewards([("ROLLOUT", {"tests": 1.0}, 1.0, 4, 0.7, "g-1")])
    out, removed = served_advantages(table)
    assert (out, removed) == (table, 0)
