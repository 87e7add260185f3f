"""The seeded IDE-fleet simulator (DESIGN §10): pure logic, no Kafka.

Users with hidden preferences and skill request suggestions; a hidden model decides acceptance
from the context; accepted code survives or is edited; tests pass or fail; agent tasks run
groups of parallel trials. A pluggable policy decides SHOWN / SUPPRESSED and every decision's
propensity is logged. Typical use::

    config = load_config("simulator/configs/default.yaml")
    fleet = Fleet(config, build_policy(config.policy))
    report = run_fleet(fleet, telemetry_client, n_requests=100_000)
"""

from policies.policy import HeuristicPolicy, Policy, RequestBatch
from simulator.config import SimulatorConfig
from simulator.config_loading import (
    DEFAULT_CONFIG_PATH,
    config_to_dict,
    config_with_overrides,
    load_config,
)
from simulator.errors import SimulatorError
from simulator.fleet import Fleet
from simulator.ground_truth import GroundTruthLog, GroundTruthSummary
from simulator.policy import POLICIES, build_policy, decide
from simulator.runner import EventSink, RunReport, run_fleet

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "POLICIES",
    "EventSink",
    "Fleet",
    "GroundTruthLog",
    "GroundTruthSummary",
    "HeuristicPolicy",
    "Policy",
    "RequestBatch",
    "RunReport",
    "SimulatorConfig",
    "SimulatorError",
    "build_policy",
    "config_to_dict",
    "config_with_overrides",
    "decide",
    "load_config",
    "run_fleet",
]
