"""`flywheel simulate`: run the seeded IDE fleet against the platform through the SDK."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import click
import yaml

from flywheel.clients import telemetry_client
from flywheel.console import err, out
from flywheel.metrics import SimulatorCollector, metrics_endpoint, metrics_options
from flywheel.options import Duration
from flywheel.settings import Settings
from ground.metrics import service_registry
from simulator import (
    DEFAULT_CONFIG_PATH,
    Fleet,
    RunReport,
    build_policy,
    config_with_overrides,
    load_config,
    run_fleet,
)


def _overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--set")
        parsed[key.strip()] = value
    return parsed


def _status(report: RunReport) -> str:
    truth = report.ground_truth
    return (
        f"{report.requests:,} requests, {report.events:,} events "
        f"({report.events_per_s:,.0f}/s), shown/1k {truth.shown_per_1000:.0f}, "
        f"accept rate {truth.accept_rate:.3f}"
    )


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=DEFAULT_CONFIG_PATH,
    show_default="simulator/configs/default.yaml",
    help="YAML file with the fleet and hidden-model parameters (docs/simulator.md).",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one parameter, e.g. --set hidden_model.base_logit=-1.2 (repeatable).",
)
@click.option(
    "--seed",
    type=int,
    help="Seed of every random draw (same seed, same events). Default: the config's.",
)
@click.option(
    "--concurrency",
    type=int,
    help="Concurrent simulated sessions (interleaved). Default: the config's.",
)
@click.option(
    "--requests",
    "n_requests",
    type=int,
    help="Stop after this many suggestion requests. Default: 10,000 unless --duration is given.",
)
@click.option(
    "--duration", "duration_s", type=Duration(0), help="Stop after this long (90s, 5m, 24h)."
)
@click.option(
    "--rate", "rate_per_s", type=float, help="Target requests/s. Default: as fast as possible."
)
@click.option(
    "--start-time",
    default="now",
    show_default=True,
    help="Event-time clock start (ISO-8601), or 'now'.",
)
@metrics_options
def simulate(
    config_path: Path, sets: tuple[str, ...], seed: int | None, concurrency: int | None,
    n_requests: int | None, duration_s: float | None, rate_per_s: float | None, start_time: str,
    metrics_port: int, metrics_host: str,
) -> None:  # fmt: skip
    """Simulate an IDE fleet (and agent rollouts) and send its events through the SDK.

    Users with hidden preferences request suggestions; the v0 policy decides what is shown and
    logs each decision's propensity. Runs until --requests or --duration (default: 10,000
    requests), then flushes; unacknowledged events are spooled, never lost.
    """
    # A fresh fleet id per run namespaces every id, so runs never collide downstream.
    overrides = {
        "sessions.start_time": start_time,
        "fleet_id": f"fleet-{uuid.uuid4().hex[:8]}",
        **_overrides(sets),
    }
    if seed is not None:
        overrides["seed"] = seed
    if concurrency is not None:
        overrides["sessions.concurrent_sessions"] = concurrency
    config = config_with_overrides(load_config(config_path), overrides)
    if n_requests is None and duration_s is None:
        n_requests = 10_000
    fleet = Fleet(config, build_policy(config.policy))
    settings = Settings.from_env()
    started = time.perf_counter()
    last: list[RunReport] = []  # the latest progress report, for metrics

    def progress(report: RunReport) -> None:
        last[:] = [report]
        status.update(_status(report))

    with telemetry_client(settings, name="simulator") as client, err.status("simulating") as status:
        collector = SimulatorCollector(lambda: last[0] if last else None, lambda: client.stats)
        with metrics_endpoint(metrics_port, metrics_host, service_registry(collector)):
            report = run_fleet(
                fleet, client, n_requests=n_requests, duration_s=duration_s,
                rate_per_s=rate_per_s, progress=progress,
            )  # fmt: skip
            status.update("flushing")
            client.flush(60)
    out.print(_status(report))
    out.print(f"by type: {yaml.safe_dump(dict(report.events_by_type), sort_keys=True).strip()}")
    out.print(
        f"delivery: {client.stats.acked:,} acked, {client.stats.spooled:,} spooled, "
        f"{client.stats.failed:,} failed in {time.perf_counter() - started:.1f}s"
    )
