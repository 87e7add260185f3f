"""The soak benchmark's pure parts: phase schedule, lag and memory summaries, verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.soak_report import Sample, Summary, summarize, write_results
from bench.soak_stats import (
    BASE,
    BURST,
    RECOVERY,
    SoakError,
    drain_time,
    parse_phases,
    phase_at,
    schedule,
    slope_per_min,
    summarize_lag,
    summarize_memory,
)
from ground.errors import FlywheelError

PHASES = schedule(300, 100)  # base 0-50, burst 50-100 at 200/s, recovery 100-300
TS = [float(t) for t in range(0, 300, 2)]


def test_default_schedule_is_sixth_sixth_rest() -> None:
    assert [(p.name, p.start_s, p.end_s, p.rate_per_s) for p in PHASES] == [
        (BASE, 0, 50, 100),
        (BURST, 50, 100, 200),
        (RECOVERY, 100, 300, 100),
    ]


def test_schedule_takes_explicit_lengths_and_factor() -> None:
    phases = schedule(150, 250, burst_factor=3, warmup_s=40, burst_s=20)
    assert [(p.start_s, p.duration_s, p.rate_per_s) for p in phases] == [
        (0, 40, 250), (40, 20, 750), (60, 90, 250),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "fix"),
    [
        ({"duration_s": 0, "rate_per_s": 1}, "--duration"),
        ({"duration_s": 60, "rate_per_s": -1}, "--rate"),
        ({"duration_s": 60, "rate_per_s": 1, "burst_factor": 0.5}, "--burst-factor"),
        ({"duration_s": 60, "rate_per_s": 1, "warmup_s": 40, "burst_s": 20}, "lengthen"),
        ({"duration_s": 60, "rate_per_s": 1, "burst_s": 0}, "--burst-s"),
    ],
)
def test_schedule_rejects_bad_options_naming_the_fix(kwargs: dict[str, float], fix: str) -> None:
    with pytest.raises(SoakError, match=fix) as info:
        schedule(**kwargs)
    assert isinstance(info.value, FlywheelError)


def test_phase_at_edges() -> None:
    assert [phase_at(PHASES, t) for t in (-1, 0, 49.9, 50, 99.9, 100, 299, 400)] == [
        BASE, BASE, BASE, BURST, BURST, RECOVERY, RECOVERY, RECOVERY,
    ]  # fmt: skip


def test_slope_per_min() -> None:
    assert slope_per_min([0, 30, 60], [10, 11, 12]) == pytest.approx(2.0)
    assert slope_per_min([0, 60, 120], [5, 5, 5]) == 0
    assert slope_per_min([7], [3]) == 0
    assert slope_per_min([1, 1], [0, 9]) == 0  # no spread in time: no slope
    with pytest.raises(SoakError):
        slope_per_min([1, 2], [1])


def test_drain_time_skips_unknown_and_counts_from_burst_end() -> None:
    ts = [90, 100, 102, 104, 106]
    assert drain_time(ts, [50, 900, None, 400, 100], 100, 500) == 4
    assert drain_time(ts, [50, 900, 800, 700, 600], 100, 500) is None


def healthy_lags() -> list[int | None]:
    """Base lag swinging 200-600 (batched commits), a backlog up to 5,000 in the burst that
    drains over 20 s, then the base swing again."""
    lags: list[int | None] = []
    for t in TS:
        swing = 200 if int(t) % 4 == 0 else 600
        if 50 <= t < 100:
            lags.append(swing + int((t - 50) * 100))
        elif 100 <= t < 120:
            lags.append(max(swing, int(5000 - (t - 100) * 250)))
        else:
            lags.append(swing)
    return lags


def test_lag_summary_of_a_healthy_run() -> None:
    lag = summarize_lag(TS, healthy_lags(), PHASES, settle_s=10)
    assert lag.base_max == 600
    assert lag.level == 750
    assert lag.burst_max == 600 + 48 * 100  # t = 98
    assert lag.drain_s == 18  # 5000 - 18 * 250 = 500 <= 750 at t = 118
    assert lag.recovery_max == 600
    assert lag.recovery_median == 600
    assert lag.bounded


def test_lag_that_keeps_growing_is_not_bounded() -> None:
    growing: list[int | None] = [int(t * 20) for t in TS]  # 1,200 messages a minute
    lag = summarize_lag(TS, growing, PHASES, settle_s=10)
    assert lag.warmup_slope_per_min == pytest.approx(1200)
    assert lag.drain_s is None
    assert not lag.bounded


def test_lag_that_settles_higher_after_the_burst_is_not_bounded() -> None:
    lags = [v if t < 100 else 2000 for t, v in zip(TS, healthy_lags(), strict=True)]
    lag = summarize_lag(TS, lags, PHASES, settle_s=10)
    assert lag.drain_s is None
    assert not lag.bounded


def test_lag_floor_and_missing_warmup() -> None:
    quiet: list[int | None] = [3] * len(TS)
    assert summarize_lag(TS, quiet, PHASES, settle_s=10).level == 100  # the floor
    unknown: list[int | None] = [None if t < 50 else 3 for t in TS]
    with pytest.raises(SoakError, match="--settle-s"):
        summarize_lag(TS, unknown, PHASES, settle_s=10)


def test_memory_slope_over_the_last_two_thirds() -> None:
    # 500 MiB, +40 MiB during the first third (start-up), then +1 MiB a minute.
    rss: list[float | None] = [500 + 40 * t / 100 if t < 100 else 540 + (t - 100) / 60 for t in TS]
    rss[10] = None  # the process was not readable once
    memory = summarize_memory(TS, rss, 300)
    assert memory.start_mib == 500
    assert memory.slope_mib_per_min == pytest.approx(1.0)
    assert memory.flat(2.0)
    assert not memory.flat(0.5)
    falling: list[float | None] = [600 - t / 10 for t in TS]  # buffers given back
    assert summarize_memory(TS, falling, 300).flat(2.0)
    assert memory.peak_mib == memory.end_mib
    with pytest.raises(SoakError):
        summarize_memory(TS, [None] * len(TS), 300)


def samples(leak_mib_per_min: float) -> list[Sample]:
    out = []
    for t, lag in zip(TS, healthy_lags(), strict=True):
        s = Sample(t, phase_at(PHASES, t), 230.0)
        s.lag = {"joiner": {"a": lag, "b": 0}, "sink": {"a": lag, "b": None if t == 150 else 1}}
        s.rss_mib = {"joiner": 800 + leak_mib_per_min * t / 60, "load": 700 + t}
        out.append(s)
    return out


def test_verdicts_and_results_json(tmp_path: Path) -> None:
    summary = summarize(samples(0.0), PHASES, 10, 0.25, 2.0, ("joiner", "sink"))
    assert summary.judged == ("joiner",)  # only workers that were sampled; the load is shown
    assert summary.verdicts()[:2] == ["lag bounded: yes", "drains after burst: yes (18 s)"]
    assert summary.verdicts()[2].startswith("memory flat: yes")
    write_results(tmp_path / "r" / "results.json", {"run_id": "x"}, PHASES, summary, samples(0))
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    assert data["run_id"] == "x"
    assert data["summary"]["lag"]["joiner"]["bounded"] is True
    assert data["summary"]["lag"]["sink"]["drain_s"] == 18  # the None sample at t=150 skipped
    assert len(data["samples"]) == len(TS)
    assert data["phases"][1]["name"] == BURST


def test_leak_fails_the_memory_verdict() -> None:
    summary: Summary = summarize(samples(5.0), PHASES, 10, 0.25, 2.0, ("joiner",))
    assert summary.verdicts()[2].startswith("memory flat: no")
    with pytest.raises(SoakError, match="no sample"):
        summarize([], PHASES, 10, 0.25, 2.0, ("joiner",))


def test_load_phases_argument() -> None:
    assert parse_phases('[["base", 50, 250], ["burst", 10, 500]]') == [
        ("base", 50.0, 250.0), ("burst", 10.0, 500.0),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="triples"):
        parse_phases('[["base", 0, 250]]')
