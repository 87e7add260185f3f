"""The views against the simulator's ground truth: a seeded fleet serves two model versions,
its events go into a real lake (the sink's Arrow conversion), and the acceptance numbers per
version read from `acceptance_by_version` equal what the fleet knows happened."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pytest

from analytics import Catalog
from processors.rewards import PendingSuggestion, Windows, add, attribute, reward_functions
from processors.rewards import rewards as rewards_of
from schemas.events import Event, SuggestionOffered
from simulator import (
    DEFAULT_CONFIG_PATH,
    Fleet,
    HeuristicPolicy,
    RequestBatch,
    config_with_overrides,
    load_config,
    run_fleet,
)
from simulator.ground_truth import GroundTruthSummary
from tests.analytics.lake_builder import write_lake

REQUESTS_PER_VERSION = 2500


class ListSink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def send(self, event: Event) -> None:
        self.events.append(event)


class ContextGate:
    """Version 2: shows when the first context feature is positive (so acceptance changes)."""

    name = "suggestion-gate"
    version = 2

    def show_probabilities(self, batch: RequestBatch) -> np.ndarray:
        return np.where(batch.contexts[:, 0] > 0, 0.9, 0.2)


def _tab_rewards(events: list[Event]) -> list[Event]:
    """tab@1 Reward events for every suggestion, as the joiner computes them."""
    pending: dict[str, PendingSuggestion] = defaultdict(PendingSuggestion)
    for event in events:
        sid = getattr(event, "suggestion_id", None)
        if isinstance(sid, str) and type(event).__name__ != "TestRunCompleted":
            pending[sid] = add(pending[sid], event)
    functions = reward_functions(["tab@1"])
    out: list[Event] = []
    for p in pending.values():
        if isinstance(p.offered, SuggestionOffered):
            out += rewards_of(attribute(p, Windows()), functions, datetime.now(UTC), "test")
    return out


@pytest.fixture(scope="module")
def fleet_lake(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[int, GroundTruthSummary], duckdb.DuckDBPyConnection]]:
    config = config_with_overrides(load_config(DEFAULT_CONFIG_PATH), {"users.n_users": 200})
    fleet = Fleet(config, HeuristicPolicy(version=1, show_probability=0.95))
    sink = ListSink()
    run_fleet(fleet, sink, n_requests=REQUESTS_PER_VERSION, flush=False)
    fleet.policy = ContextGate()
    run_fleet(fleet, sink, n_requests=REQUESTS_PER_VERSION)
    events = sink.events + _tab_rewards(sink.events)
    lake = tmp_path_factory.mktemp("lake")
    assert write_lake(lake, events, rows_per_file=400) > 20
    con = Catalog(lake).connect()
    yield fleet.ground_truth.by_version(), con
    con.close()


def test_acceptance_by_version_equals_the_fleets_ground_truth(
    fleet_lake: tuple[dict[int, GroundTruthSummary], duckdb.DuckDBPyConnection],
) -> None:
    truth, con = fleet_lake
    rows = con.execute(
        "select model_version, requests, shown, accepted, shown_per_1000, accept_rate "
        "from acceptance_by_version order by model_version"
    ).fetchall()
    assert [r[0] for r in rows] == sorted(truth) == [1, 2]
    for version, requests, shown, accepted, shown_per_1000, accept_rate in rows:
        t = truth[version]
        assert (requests, shown, accepted) == (t.requests, t.shown, t.accepted)
        assert shown_per_1000 == pytest.approx(t.shown_per_1000)
        assert accept_rate == pytest.approx(t.accept_rate)
    assert truth[1].accept_rate != pytest.approx(truth[2].accept_rate, abs=0.01)


def test_reward_per_request_equals_the_realised_tab_reward(
    fleet_lake: tuple[dict[int, GroundTruthSummary], duckdb.DuckDBPyConnection],
) -> None:
    truth, con = fleet_lake
    rows = con.execute(
        "select model_version, rewards, reward_per_request from reward_by_version "
        "where reward_fn = 'tab@1' order by model_version"
    ).fetchall()
    for version, count, per_request in rows:
        assert count == truth[version].requests
        assert per_request == pytest.approx(truth[version].reward_per_request)


def test_funnel_matches_acceptance(
    fleet_lake: tuple[dict[int, GroundTruthSummary], duckdb.DuckDBPyConnection],
) -> None:
    _, con = fleet_lake
    funnel = con.execute(
        "select f.offered = a.requests and f.accepted = a.accepted and f.survived <= f.accepted "
        "and f.survived > 0 from suggestion_funnel f join acceptance_by_version a using "
        "(model_name, model_version)"
    ).fetchall()
    assert funnel == [(True,), (True,)]


def test_the_lake_spans_many_files(tmp_path: Path) -> None:
    # Guard for the fixture: the views were checked over many files and several partitions.
    config = config_with_overrides(load_config(DEFAULT_CONFIG_PATH), {"users.n_users": 20})
    sink = ListSink()
    run_fleet(Fleet(config, HeuristicPolicy()), sink, n_requests=300)
    files = write_lake(tmp_path, sink.events, rows_per_file=50)
    assert files == len(list(tmp_path.glob("*/dt=*/hour=*/*.parquet")))
