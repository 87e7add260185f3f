"""What a demo run measured, per model version and over time, and where it is kept.

A run's results live in ``$FLYWHEEL_HOME/demo/<run_id>/results.json`` (read by
``flywheel report``) and, for SQL, in the lake at
``<lake>/demo.results/dt=YYYY-MM-DD/hour=HH/<run_id>.parquet`` (one row per version; the
hive-style folders every lake table has). The realised numbers come from the simulator's ground
truth; the release check's come from the version's ModelVersionEvents.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ground.errors import FlywheelError
from ground.store import Store

RESULTS_FILE = "results.json"
LAKE_TABLE = "demo.results"


@dataclass(frozen=True)
class VersionResult:
    """One model version's row of the result table (v0 is the heuristic the fleet starts on)."""

    version: int
    parent_version: int | None
    requests: int  # requests the version served in the simulated fleet
    shown_per_1000: float
    accept_rate: float  # accepted / shown
    reward_per_request: float  # realised tab@1 per request
    gate_estimate: float | None  # doubly-robust estimate of the version's value
    gate_lower: float | None  # production's value + the paired lift's lower bound (the verdict)
    gate_baseline: float | None  # production's value on the same held-out data
    decision: str  # last ModelVersionEvent type, e.g. PROMOTED, GATE_FAILED, ROLLED_BACK
    reason: str | None
    data_to_live_s: float | None  # newest reward in the window → first served in the fleet
    decided_at_s: float | None  # seconds after the run started
    # The off-policy check's two-sided interval of the version's value (its own DR terms): where the
    # realised reward per request should fall. None in results written before it existed.
    gate_interval_low: float | None = None
    gate_interval_high: float | None = None


@dataclass(frozen=True)
class AgentVersionResult:
    """One agent LM version's row: the eval suite's numbers from its ModelVersionEvents, the
    online trial reward from the lake."""

    version: int
    parent_version: int | None
    eval_pass_at_1: float | None  # greedy pass@1 on the held-out eval suite
    eval_pass_lower: float | None  # production's pass@1 + the lift's lower bound
    online_reward: float | None  # mean reward of the trials the version sampled
    trials: int
    train_tokens: int
    stale_rows: int  # trials dropped by the staleness bound
    data_to_live_s: float | None  # newest reward in the window → promoted
    decision: str
    reason: str | None
    decided_at_s: float | None
    # Real-time RL: rows of its training windows that were completions served to the agent users
    # (of train_rows), and the mean agent_use@1 reward of the completions this version served
    # that users reacted to (repository: one per tool session, its last turn), and their count.
    train_rows: int = 0
    served_rows: int = 0
    served_reward: float | None = None
    served: int = 0
    # The eval suite per difficulty level ("1" -> pass@1) and on the environment's second
    # held-out set (repository: unseen templates; program synthesis: seen programs).
    level_pass_at_1: dict[str, float] = field(default_factory=dict)
    extra_pass_at_1: float | None = None

    @property
    def served_share(self) -> float | None:
        return self.served_rows / self.train_rows if self.train_rows else None


@dataclass(frozen=True)
class TimelinePoint:
    """Totals one version served during one sampling interval of the run."""

    t_s: float  # end of the interval, seconds after the run started
    version: int
    requests: int
    shown: int
    accepted: int
    reward_sum: float


@dataclass
class RunResults:
    """Everything ``flywheel report`` needs about one demo run."""

    run_id: str
    model_name: str
    started_at: str  # ISO 8601
    config: str  # simulator config file the run used
    versions: list[VersionResult] = field(default_factory=list)
    timeline: list[TimelinePoint] = field(default_factory=list)
    elapsed_s: float = 0.0
    loop: str = "tab"  # which loops ran: tab, agent or both
    agent_model: str | None = None
    agent_versions: list[AgentVersionResult] = field(default_factory=list)
    agent_env: str | None = None  # the agent loop's environment
    agent_extra_eval: str | None = None  # what its second held-out set is ("unseen templates")
    # Sampled pass@1 and pass@8 on held-out tasks before (the warm-up) and after (the newest
    # production): [{"version": 1, "pass@1": 0.12, "pass@8": 0.31, "tasks": 32}, …]
    agent_pass_at_k: list[dict[str, float]] = field(default_factory=list)
    # One held-out episode of the newest production, turn by turn (AgentEpisode as a dict).
    agent_episode: dict[str, Any] | None = None

    def agent_headline(self) -> tuple[AgentVersionResult, AgentVersionResult] | None:
        """(first version, best promoted version by eval pass@1), when a later one was
        promoted."""
        if not self.agent_versions:
            return None
        first = self.agent_versions[0]
        promoted = [v for v in self.agent_versions[1:] if v.decision == "PROMOTED"]
        if not promoted:
            return None
        return first, max(promoted, key=lambda v: v.eval_pass_at_1 or 0.0)

    @property
    def final_production(self) -> VersionResult | None:
        """The newest promoted version, else v0."""
        promoted = [v for v in self.versions if v.decision == "PROMOTED"]
        if promoted:
            return promoted[-1]
        return next((v for v in self.versions if v.version == 0), None)

    @property
    def baseline(self) -> VersionResult | None:
        return next((v for v in self.versions if v.version == 0), None)

    def headline(self) -> tuple[float, float] | None:
        """(change in shown per 1,000, change in accept rate) of final production vs v0."""
        base, final = self.baseline, self.final_production
        if base is None or final is None or not base.shown_per_1000 or not base.accept_rate:
            return None
        return (
            final.shown_per_1000 / base.shown_per_1000 - 1.0,
            final.accept_rate / base.accept_rate - 1.0,
        )

    def save(self, run_dir: Path, lake: Path | Store) -> Path:
        """Write results.json atomically under ``run_dir`` and the version table to the lake
        (on disk or in a store: one atomic write either way)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / RESULTS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)
        if self.versions:
            table = pa.Table.from_pylist(
                [
                    {"run_id": self.run_id, "model_name": self.model_name, **asdict(v)}
                    for v in self.versions
                ]
            )
            started = datetime.fromisoformat(self.started_at).astimezone(UTC)
            key = f"{LAKE_TABLE}/dt={started:%Y-%m-%d}/hour={started:%H}/{self.run_id}.parquet"
            store = Store.at(lake)
            store.write_atomically(key, lambda out: pq.write_table(table, out))
        return path

    @classmethod
    def load(cls, path: Path) -> RunResults:
        """Read a results.json; FlywheelError naming the fix when missing or malformed."""
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
            versions = [VersionResult(**v) for v in raw.pop("versions")]
            timeline = [TimelinePoint(**p) for p in raw.pop("timeline")]
            agent = [AgentVersionResult(**v) for v in raw.pop("agent_versions", [])]
            known = {f.name for f in fields(cls)}
            return cls(
                **{k: v for k, v in raw.items() if k in known}, versions=versions,
                timeline=timeline, agent_versions=agent,
            )  # fmt: skip
        except FileNotFoundError as exc:
            raise FlywheelError(
                f"no demo results at {path}; run `flywheel demo` first (or pass --run)."
            ) from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise FlywheelError(f"{path} is not a demo results file ({exc}).") from exc


def latest_run(demo_dir: Path) -> Path:
    """results.json of the newest run under ``demo_dir``; FlywheelError if there is none."""
    runs = sorted(demo_dir.glob(f"*/{RESULTS_FILE}"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise FlywheelError(f"no demo runs under {demo_dir}; run `flywheel demo` first.")
    return runs[-1]
