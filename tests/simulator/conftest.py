"""Shared fixtures: one default-config run, generated once per test session."""

from __future__ import annotations

import pytest

from schemas.events import Event
from simulator import Fleet, HeuristicPolicy, SimulatorConfig

N_REQUESTS = 6000

FleetRun = tuple[Fleet, list[Event]]


@pytest.fixture(scope="session")
def default_run() -> FleetRun:
    """The events of N_REQUESTS requests of the default config under the v0 heuristic."""
    fleet = Fleet(SimulatorConfig(), HeuristicPolicy())
    return fleet, list(fleet.events(N_REQUESTS, batch_size=500))
