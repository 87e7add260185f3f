"""`flywheel demo`: the main job. For now, the data path of the loop on the local stack.

Stack → topics and schemas → an Avro probe → the simulated IDE fleet through the SDK → the
lake sink → DuckDB over the Parquet lake, checked against the simulator's ground truth. The
learning half of the loop (DESIGN §10) joins as its stages land.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import click
import duckdb
from rich.table import Table

from flywheel.clients import codec, telemetry_client
from flywheel.console import err, out
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings
from processors.lake import LakeSink
from simulator import (
    DEFAULT_CONFIG_PATH,
    Fleet,
    GroundTruthSummary,
    build_policy,
    config_with_overrides,
    load_config,
    run_fleet,
)
from streams.client import CLIENT_TOPICS
from streams.probe import round_trip


def _simulate(settings: Settings, n_requests: int) -> tuple[str, GroundTruthSummary]:
    """Runs a fresh fleet through the SDK; returns its producer id and ground truth."""
    config = config_with_overrides(
        load_config(DEFAULT_CONFIG_PATH),
        {"sessions.start_time": "now", "fleet_id": f"demo-{time.time_ns():x}"},
    )
    fleet = Fleet(config, build_policy(config.policy))
    with telemetry_client(settings, name="demo") as client:
        run_fleet(fleet, client, n_requests=n_requests)
        client.flush(60)
    return fleet.producer, fleet.ground_truth.summary()


def _sink(settings: Settings) -> int:
    """Drain the telemetry topics into the lake once; returns the rows written."""
    sink = LakeSink(settings.kafka_client_config(), codec(settings), settings.lake, CLIENT_TOPICS)
    return sink.run(threading.Event(), until_caught_up=True).rows


_ACCEPT_RATE_SQL = """
    select count(*), count(o.suggestion_id)
    from read_parquet($suggestions, hive_partitioning = true) s
    left join (
        select distinct suggestion_id
        from read_parquet($outcomes, hive_partitioning = true)
        where outcome in ('ACCEPTED', 'PARTIAL')
    ) o using (suggestion_id)
    where s.decision = 'SHOWN' and s.producer = $producer
"""


def _lake_accept_rate(lake: Path, producer: str) -> tuple[int, float]:
    """Suggestions `producer` showed and their accept rate, from the Parquet lake alone."""
    params = {
        "producer": producer,
        "suggestions": f"{lake}/telemetry.suggestions/**/*.parquet",
        "outcomes": f"{lake}/telemetry.outcomes/**/*.parquet",
    }
    with duckdb.connect() as con:
        [(shown, accepted)] = con.execute(_ACCEPT_RATE_SQL, params).fetchall()
    return int(shown), int(accepted) / shown if shown else 0.0


@click.command()
@click.option("--requests", "n_requests", default=2_000, show_default=True, type=click.IntRange(1),
              help="Suggestion requests the simulated fleet makes.")  # fmt: skip
def demo(n_requests: int) -> None:
    """Run the loop's data path on the local stack and print what happened at each step."""
    settings = Settings.from_env()
    steps = Table("step", "result", "seconds")
    with err.status("starting the platform") as status:
        t = time.perf_counter()

        def step(name: str, result: str) -> None:
            nonlocal t
            steps.add_row(name, result, f"{time.perf_counter() - t:.1f}")
            t = time.perf_counter()

        report = ensure_infrastructure(settings, lambda msg: status.update(msg))
        where = "local stack" if settings.uses_local_stack else "external cluster"
        step("stack up", f"{where}: {settings.kafka_bootstrap}")
        step("topics", f"{len(report.created)} created, {len(report.existing)} existing, "
                       f"{len(report.drift)} drifted")  # fmt: skip
        status.update("round-tripping an Avro event")
        probe = round_trip(settings.kafka_client_config(), settings.registry_url)
        step("avro round trip", f"{probe.topic}@{probe.offset}, schema id {probe.schema_id}")
        status.update(f"simulating {n_requests:,} suggestion requests")
        producer, truth = _simulate(settings, n_requests)
        step("simulate", f"{truth.requests:,} requests, {truth.shown:,} shown, "
                         f"accept rate {truth.accept_rate:.3f} (ground truth)")  # fmt: skip
        status.update("sinking telemetry into the lake")
        rows = _sink(settings)
        step("lake sink", f"{rows:,} rows -> {settings.lake}")
        shown, rate = _lake_accept_rate(settings.lake, producer)
        step("duckdb", f"{shown:,} shown in the lake, accept rate {rate:.3f} (from Parquet)")
    out.print(steps)
    out.print(f"registry: {settings.registry_url}   lake: {settings.lake}")
    out.print("The learning half of the loop joins this demo as its stages land.")
