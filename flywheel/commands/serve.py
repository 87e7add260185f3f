"""`flywheel serve`: one serving replica of a model, over HTTP (fleet/serving_app.py).

The replica is a ``fleet.subscriber.ModelSubscriber``: it follows ``models.channels``, verifies and
loads each version it is pointed at, and acks on ``models.acks``; until production points at a
version it serves the simulator's v0 heuristic policy (the fallback).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import click

from flywheel.console import err, out
from flywheel.listen import listen, run_server
from flywheel.metrics import metrics_endpoint, metrics_options
from flywheel.settings import Settings

if TYPE_CHECKING:
    from fleet.serving_app import ServingMetrics
    from fleet.subscriber import ModelSubscriber
    from model_registry.registry import ModelTopics
    from policies.policy import Policy

DEFAULT_PORT = 8090
DEFAULT_MODEL = "suggestion-gate"


def default_replica_id() -> str:
    """``<host>-<pid>``: unique per process, readable in acks and metrics."""
    return f"{socket.gethostname()}-{os.getpid()}"


def build_replica(
    settings: Settings,
    model: str,
    replica_id: str,
    *,
    fallback_show_probability: float = 0.95,
    topics: ModelTopics | None = None,
    poll_interval_s: float = 0.5,
) -> ModelSubscriber[Policy]:
    """A subscriber serving ``model``: trained versions load with ``policies.gate_net.load_policy``
    (a version that needs extra feature columns is rejected: this replica has no feature
    provider), the fallback is the heuristic v0 (the simulator's default policy). ``topics``:
    the registry's topics (default: the platform's). Raises ServingError when the channels
    topic is missing or the broker is unreachable."""
    from fleet.subscriber import ModelSubscriber
    from flywheel.clients import codec
    from model_registry.registry import DEFAULT_TOPICS, FALLBACK_VERSION
    from policies.gate_net import load_policy
    from policies.policy import HeuristicPolicy

    fallback = HeuristicPolicy(
        name=model, version=FALLBACK_VERSION, show_probability=fallback_show_probability
    )
    return ModelSubscriber(
        settings.kafka_client_config(),
        codec(settings),
        model,
        replica_id,
        lambda path, version: load_policy(path, model, version),
        fallback,
        topics=topics or DEFAULT_TOPICS,
        poll_interval_s=poll_interval_s,
    )


def follow(
    replica: ModelSubscriber[Any], caught_up: threading.Event, stop: threading.Event
) -> None:
    """Read the channels to their end (retrying while the broker is away), set ``caught_up``,
    then follow them in the replica's background thread until the replica is stopped."""
    from fleet.errors import ServingError

    while not stop.is_set():
        try:
            replica.poll_once()
        except ServingError as exc:
            err.print(f"[yellow]replica {replica.replica_id}[/]: {exc}; retrying")
            stop.wait(5.0)
            continue
        caught_up.set()
        replica.start()
        return


def served(replica: ModelSubscriber[Policy]) -> str:
    """``suggestion-gate v3 (canary v4 at 10%)``, or ``suggestion-gate v0 (fallback)``."""
    snapshot = replica.snapshot
    text = f"{replica.model_name} v{replica.serving_version}"
    if snapshot.production is None:
        text += " (fallback)"
    if snapshot.canary is not None:
        text += f" (canary v{snapshot.canary.version} at {snapshot.canary.traffic_fraction:.0%})"
    return text


def status_line(replica: ModelSubscriber[Policy], decisions: int, per_s: float) -> str:
    """``serving suggestion-gate v3, 12.5 decisions/s, 1,234 total``."""
    return f"serving {served(replica)}, {per_s:,.1f} decisions/s, {decisions:,} total"


def report_status(
    replica: ModelSubscriber[Policy],
    metrics: ServingMetrics,
    every_s: float,
    stop: threading.Event,
) -> None:
    """Print :func:`status_line` every ``every_s`` seconds until ``stop``."""
    last_count, last_t = metrics.decisions, time.monotonic()
    while not stop.wait(every_s):
        count, now = metrics.decisions, time.monotonic()
        per_s = (count - last_count) / max(now - last_t, 1e-9)
        err.print(status_line(replica, count, per_s))
        last_count, last_t = count, now


@click.command()
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help="Model to serve.")
@click.option(
    "--replica-id",
    default=None,
    help="This replica's id in acks and metrics. Default: <hostname>-<pid>.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--max-batch",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most requests in one POST /v1/decide; more get 413.",
)
@click.option(
    "--status-every-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between status lines (version served, decisions/s).",
)
@metrics_options
def serve(
    model: str,
    replica_id: str | None,
    host: str,
    port: int,
    max_batch: int,
    status_every_s: float,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Serve MODEL's decisions over HTTP, following the versions the registry points at.

    POST /v1/decide ({"user_id", "context": [floats]} or an array of them) answers
    {"show_probability", "model", "version", "channel"}; GET /v1/models, GET /healthz (503
    until the channels are read to their end), GET /metrics (Prometheus; also on
    --metrics-port if set). Until a version is promoted the replica serves the heuristic v0.
    Stops on Ctrl-C or SIGTERM. See docs/models.md.
    """
    from fleet.serving_app import create_app

    settings = Settings.from_env()
    replica_id = replica_id or default_replica_id()
    sock = listen(host, port)  # before the Kafka clients: a busy port fails fast and clearly
    replica = build_replica(settings, model, replica_id)
    stop = threading.Event()  # set once the server has stopped (run_server handles signals)
    caught_up = threading.Event()
    app = create_app(replica, ready=caught_up.is_set, max_batch=max_batch)
    metrics: ServingMetrics = app.state.metrics
    threads = [
        threading.Thread(target=follow, args=(replica, caught_up, stop), daemon=True),
        threading.Thread(
            target=report_status, args=(replica, metrics, status_every_s, stop), daemon=True
        ),
    ]
    with metrics_endpoint(metrics_port, metrics_host, metrics.registry):
        for thread in threads:
            thread.start()
        out.print(
            f"[green]serve[/] {model} as replica {replica_id} on http://{host}:{port} "
            "(POST /v1/decide, GET /v1/models, GET /healthz, GET /metrics), broker "
            f"{settings.kafka_bootstrap}; Ctrl-C to stop"
        )
        try:
            run_server(app, sock)  # a graceful shutdown on Ctrl-C or SIGTERM
        finally:
            stop.set()
            threads[0].join(timeout=10)
            replica.close()
            out.print(
                f"serve stopped: {metrics.decisions:,} decisions; last served {served(replica)}"
            )
