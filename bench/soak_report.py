"""The soak benchmark's samples, their summary table, verdicts, JSON results and plot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.soak_stats import (
    BURST,
    LagSummary,
    MemorySummary,
    Phase,
    SoakError,
    summarize_lag,
    summarize_memory,
)


@dataclass
class Sample:
    """What the soak saw at ``t`` seconds after the load started."""

    t: float
    phase: str
    events_per_s: float  # produced by the load since the previous sample
    lag: dict[str, dict[str, int | None]] = field(default_factory=dict)  # group -> topic -> lag
    rss_mib: dict[str, float | None] = field(default_factory=dict)  # worker -> process tree RSS
    cpu_pct: dict[str, float | None] = field(default_factory=dict)  # worker -> % of one core

    def total_lag(self, group: str) -> int | None:
        """The group's lag over its topics; None if any topic's is unknown."""
        lags = list(self.lag.get(group, {}).values())
        if not lags or any(v is None for v in lags):
            return None
        return sum(v for v in lags if v is not None)


@dataclass(frozen=True)
class Summary:
    lag: dict[str, LagSummary]
    memory: dict[str, MemorySummary]
    max_slope_mib_per_min: float
    judged: tuple[str, ...]  # the workers the memory verdict is about

    def verdicts(self) -> list[str]:
        bounded = all(s.bounded for s in self.lag.values())
        drains = [s.drain_s for s in self.lag.values()]
        drained = all(d is not None for d in drains)
        slowest = max((d for d in drains if d is not None), default=0.0)
        flat = all(self.memory[w].flat(self.max_slope_mib_per_min) for w in self.judged)
        return [
            f"lag bounded: {'yes' if bounded else 'no'}",
            f"drains after burst: {'yes' if drained else 'no'}"
            + (f" ({slowest:.0f} s)" if drained else ""),
            f"memory flat: {'yes' if flat else 'no'} "
            f"(RSS slope ≤ {self.max_slope_mib_per_min:g} MiB/min: {', '.join(self.judged)})",
        ]


def summarize(
    samples: Sequence[Sample],
    phases: Sequence[Phase],
    settle_s: float,
    tolerance: float,
    max_slope_mib_per_min: float,
    judged: Sequence[str],
) -> Summary:
    """Lag summary per group and memory summary per worker; raises SoakError without samples."""
    if not samples:
        raise SoakError("no sample was taken; the run stopped before the load started")
    ts = [s.t for s in samples]
    groups = sorted({g for s in samples for g in s.lag})
    workers = sorted({w for s in samples for w in s.rss_mib})
    duration = phases[-1].end_s
    return Summary(
        lag={
            g: summarize_lag(ts, [s.total_lag(g) for s in samples], phases, settle_s, tolerance)
            for g in groups
        },
        memory={
            w: summarize_memory(ts, [s.rss_mib.get(w) for s in samples], duration) for w in workers
        },
        max_slope_mib_per_min=max_slope_mib_per_min,
        judged=tuple(w for w in judged if w in workers),
    )


def _n(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.0f}{unit}"


def print_summary(console: Console, summary: Summary) -> None:
    lag = Table("group", "lag max base", "lag max burst", "drain after burst", "lag max after",
                "lag median after", "lag slope /min warm-up, after",
                title="consumer lag (messages)")  # fmt: skip
    for group, s in summary.lag.items():
        lag.add_row(group, _n(s.base_max), _n(s.burst_max), _n(s.drain_s, " s"),
                    _n(s.recovery_max), _n(s.recovery_median),
                    f"{s.warmup_slope_per_min:+,.0f}, "
                    f"{s.recovery_slope_per_min:+,.0f}")  # fmt: skip
    console.print(lag)
    memory = Table("worker", "RSS start MiB", "RSS end MiB", "RSS peak MiB",
                   "slope MiB/min (last 2/3)", title="memory (process tree RSS)")  # fmt: skip
    for worker, m in summary.memory.items():
        memory.add_row(worker, f"{m.start_mib:.1f}", f"{m.end_mib:.1f}", f"{m.peak_mib:.1f}",
                       f"{m.slope_mib_per_min:+.2f}")  # fmt: skip
    console.print(memory)
    for line in summary.verdicts():
        console.print(line)


def write_results(
    path: Path,
    meta: Mapping[str, Any],
    phases: Sequence[Phase],
    summary: Summary | None,
    samples: Sequence[Sample],
) -> None:
    """``results.json``: options and environment, phases, summary, verdicts, every sample."""
    data = {
        **meta,
        "phases": [asdict(p) for p in phases],
        "summary": None
        if summary is None
        else {
            "lag": {g: {**asdict(s), "bounded": s.bounded} for g, s in summary.lag.items()},
            "memory": {w: asdict(m) for w, m in summary.memory.items()},
            "verdicts": summary.verdicts(),
        },
        "samples": [asdict(s) for s in samples],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def plot(path: Path, samples: Sequence[Sample], phases: Sequence[Phase]) -> None:
    """PNG: lag per group, RSS per worker and produced events/s over time, burst shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [s.t for s in samples]
    fig, (ax_lag, ax_rss, ax_rate) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for group in sorted({g for s in samples for g in s.lag}):
        lags = [s.total_lag(group) for s in samples]
        ax_lag.plot(ts, [float("nan") if v is None else v for v in lags], label=group)
    ax_lag.set_ylabel("consumer lag (messages)")
    for worker in sorted({w for s in samples for w in s.rss_mib}):
        rss = [s.rss_mib.get(worker) for s in samples]
        ax_rss.plot(ts, [float("nan") if v is None else v for v in rss], label=worker)
    ax_rss.set_ylabel("RSS (MiB)")
    ax_rate.plot(ts, [s.events_per_s for s in samples], color="black", label="produced")
    ax_rate.set_ylabel("events/s")
    ax_rate.set_xlabel("seconds since the load started")
    for ax in (ax_lag, ax_rss, ax_rate):
        for phase in phases:
            if phase.name == BURST:
                ax.axvspan(phase.start_s, phase.end_s, color="orange", alpha=0.15, label="burst")
        ax.legend(loc="upper left", fontsize="small")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
