"""The report's plots, as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: never needs a display

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from flywheel.demo.results import RunResults, TimelinePoint

_DPI = 110


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def _by_version(points: list[TimelinePoint]) -> dict[int, list[TimelinePoint]]:
    series: dict[int, list[TimelinePoint]] = defaultdict(list)
    for p in points:
        if p.requests:
            series[p.version].append(p)
    return dict(sorted(series.items()))


def timeline(results: RunResults, path: Path) -> Path:
    """Accept rate and suggestions shown per 1,000 requests, per version, over the run."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for version, points in _by_version(results.timeline).items():
        t = [p.t_s / 60 for p in points]
        top.plot(
            t, [p.accepted / p.shown if p.shown else 0 for p in points], ".-", label=f"v{version}"
        )
        bottom.plot(t, [1000 * p.shown / p.requests for p in points], ".-", label=f"v{version}")
    top.set_ylabel("accept rate")
    bottom.set_ylabel("shown per 1,000 requests")
    bottom.set_xlabel("minutes since the run started")
    top.legend(ncol=4, fontsize="small")
    top.set_title("Acceptance and suggestion volume per model version")
    return _save(fig, path)


def reward(results: RunResults, path: Path) -> Path:
    """Realised reward per request of every version, coloured by the release check's decision."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    colours = {"PROMOTED": "tab:green", "GATE_FAILED": "tab:red", "ROLLED_BACK": "tab:orange"}
    versions = [v for v in results.versions if v.requests]
    ax.bar(
        [f"v{v.version}" for v in versions],
        [v.reward_per_request for v in versions],
        color=[colours.get(v.decision, "tab:gray") for v in versions],
    )
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_ylabel("tab@1 reward per request")
    ax.set_title(
        "Realised reward per request (green promoted, red gate failed, orange rolled back)"
    )
    return _save(fig, path)


def gate(results: RunResults, path: Path) -> Path:
    """The off-policy check's estimate with its value interval (or, in older results, the
    paired lower bound) against the value realised in the fleet."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    checked = [v for v in results.versions if v.gate_estimate is not None]
    xs = range(len(checked))
    est = [v.gate_estimate or 0.0 for v in checked]
    below = [e - (v.gate_interval_low if v.gate_interval_low is not None else v.gate_lower or e)
             for e, v in zip(est, checked, strict=True)]  # fmt: skip
    above = [(v.gate_interval_high if v.gate_interval_high is not None else e) - e
             for e, v in zip(est, checked, strict=True)]  # fmt: skip
    ax.errorbar(
        [x - 0.1 for x in xs],
        est,
        yerr=[below, above],
        fmt="o",
        capsize=4,
        label="gate estimate (DR) and its interval",
    )
    ax.plot(
        [x + 0.1 for x in xs],
        [v.reward_per_request if v.requests else float("nan") for v in checked],
        "s",
        label="realised in the fleet",
    )
    baselines = [float("nan") if v.gate_baseline is None else v.gate_baseline for v in checked]
    ax.plot(
        list(xs), baselines, "_", markersize=20, color="black", label="production on the same data"
    )
    ax.set_xticks(list(xs), [f"v{v.version}" for v in checked])
    ax.set_ylabel("reward per request")
    ax.legend(fontsize="small")
    ax.set_title("Off-policy gate: estimate vs realised value")
    return _save(fig, path)


def cadence(results: RunResults, path: Path) -> Path:
    """When each version was decided, and its data → live-in-the-fleet time."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    decided = [v for v in results.versions if v.decided_at_s is not None]
    left.plot(
        [v.decided_at_s / 60 for v in decided if v.decided_at_s is not None],
        [v.version for v in decided],
        "o-",
    )
    left.set_xlabel("minutes since the run started")
    left.set_ylabel("version decided")
    live = [v for v in results.versions if v.data_to_live_s is not None]
    right.bar([f"v{v.version}" for v in live], [v.data_to_live_s or 0.0 for v in live])
    right.axhline(180, color="tab:red", linestyle="--", linewidth=1, label="3-minute target")
    right.set_ylabel("data → live (s)")
    right.legend(fontsize="small")
    fig.suptitle("Cadence")
    return _save(fig, path)


def agent(results: RunResults, path: Path) -> Path:
    """The agent's versions: eval-suite pass@1 with its lower bound, and the online reward."""
    fig, ax = plt.subplots(figsize=(9, 3.5))
    colours = {"PROMOTED": "tab:green", "GATE_FAILED": "tab:red", "ROLLED_BACK": "tab:orange"}
    versions = results.agent_versions
    xs = list(range(len(versions)))
    passes = [v.eval_pass_at_1 or 0.0 for v in versions]
    below = [p - (v.eval_pass_lower if v.eval_pass_lower is not None else p)
             for p, v in zip(passes, versions, strict=True)]  # fmt: skip
    ax.bar(xs, passes, color=[colours.get(v.decision, "tab:gray") for v in versions],
           yerr=[below, [0.0] * len(xs)], capsize=4, label="eval pass@1 (lower bound)")  # fmt: skip
    online = [float("nan") if v.online_reward is None else v.online_reward for v in versions]
    ax.plot(xs, online, "ks", label="online trial reward")
    ax.set_xticks(xs, [f"v{v.version}" for v in versions])
    ax.set_ylabel("pass@1 / reward")
    ax.legend(fontsize="small")
    ax.set_title("Agent versions (green promoted, red gate failed, orange rolled back)")
    return _save(fig, path)


# The suggestion-gate loop's plots; the agent's when the run had an agent loop.
PLOTS = {"timeline": timeline, "reward": reward, "gate": gate, "cadence": cadence}
AGENT_PLOTS = {"agent": agent}
