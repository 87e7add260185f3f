"""How much a perfect suggestion gate could gain over version 0 on a given configuration.

The oracle shows exactly the requests with P(accept) > 0.25 (where ``tab@1`` pays); version 0
shows (almost) everything. Both are evaluated on the same simulated requests, in expectation
over the hidden P(accept), so the numbers carry no outcome noise. Run
``python -m simulator.calibration [config.yaml]`` to print them for a config.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from simulator.config import SimulatorConfig
from simulator.config_loading import load_config
from simulator.fleet import Fleet
from simulator.ground_truth import BREAK_EVEN
from simulator.policy import build_policy


@dataclass(frozen=True)
class CalibrationReport:
    """Fleet-wide acceptance and the oracle's gains over the configured version-0 policy."""

    requests: int
    mean_p_accept: float  # over all requests
    share_below_break_even: float  # requests with P(accept) < 0.25
    v0_shown_per_1000: float
    v0_accept_rate: float  # expected, among the requests v0 showed
    oracle_shown_per_1000: float
    oracle_accept_rate: float
    shown_reduction: float  # 1 - oracle shown / v0 shown
    accept_rate_lift: float  # oracle accept rate / v0 accept rate - 1
    v0_reward_per_request: float  # expected tab@1
    oracle_reward_per_request: float


def measure_calibration(config: SimulatorConfig, n_requests: int = 50_000) -> CalibrationReport:
    """Simulate ``n_requests`` requests of ``config`` under its policy and compare the oracle.

    Raises :class:`SimulatorError` when the config's policy is unknown.
    """
    fleet = Fleet(config, build_policy(config.policy), keep_requests=n_requests)
    remaining = n_requests
    while remaining:
        fleet.step(min(remaining, 4096))
        remaining -= min(remaining, 4096)
    table = fleet.ground_truth.table()
    p, shown = table.p_accept, table.shown
    oracle = p > BREAK_EVEN
    v0_rate = float(p[shown].mean()) if shown.any() else 0.0
    oracle_rate = float(p[oracle].mean()) if oracle.any() else 0.0
    return CalibrationReport(
        requests=n_requests,
        mean_p_accept=float(p.mean()),
        share_below_break_even=float(np.mean(p < BREAK_EVEN)),
        v0_shown_per_1000=1000.0 * float(shown.mean()),
        v0_accept_rate=v0_rate,
        oracle_shown_per_1000=1000.0 * float(oracle.mean()),
        oracle_accept_rate=oracle_rate,
        shown_reduction=1.0 - float(oracle.sum()) / max(1, int(shown.sum())),
        accept_rate_lift=oracle_rate / v0_rate - 1.0 if v0_rate else 0.0,
        v0_reward_per_request=float(np.where(shown, p - BREAK_EVEN, 0.0).mean()),
        oracle_reward_per_request=float(np.maximum(p - BREAK_EVEN, 0.0).mean()),
    )


def main(argv: list[str] | None = None) -> None:
    """Print the calibration report of the config file given (default: the built-in defaults)."""
    args = sys.argv[1:] if argv is None else argv
    config = load_config(args[0]) if args else SimulatorConfig()
    report = measure_calibration(config)
    for name, value in vars(report).items():
        print(f"{name:28s} {value:.4f}" if isinstance(value, float) else f"{name:28s} {value}")


if __name__ == "__main__":
    main()
