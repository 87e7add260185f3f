"""`flywheel serve`: one serving replica of a model, over HTTP.

The replica is a ``fleet.subscriber.ModelSubscriber``: it follows ``models.channels``, verifies and
loads each version it is pointed at, and acks on ``models.acks``. ``--kind gate`` (the default)
serves the suggestion gate's decisions (fleet/serving_app.py); until production points at a
version it serves the v0 heuristic policy (``policies.policy.fallback_policy``). ``--kind agent``
serves the agent LM through the OpenAI API (fleet/agent_app.py), with requests batched into
``generate``, a cross-request prefix cache and speculative edits (fleet/agent_engine.py); every
completion is an ``AgentCompletion`` event on ``agent.completions``.
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
from flywheel.options import listen_options, status_every_option
from flywheel.settings import Settings

if TYPE_CHECKING:
    from fleet.serving_app import ServingMetrics
    from fleet.subscriber import ModelSubscriber
    from model_registry.registry import ModelTopics
    from policies.policy import Policy

DEFAULT_PORT = 8091  # `flywheel features serve` has 8090, the gateway 8088 (docs/cli.md)
DEFAULT_MODEL = "suggestion-gate"
DEFAULT_AGENT_MODEL = "agent-lm"


def default_replica_id() -> str:
    """``<host>-<pid>``: unique per process, readable in acks and metrics."""
    return f"{socket.gethostname()}-{os.getpid()}"


def build_replica(
    settings: Settings,
    model: str,
    replica_id: str,
    *,
    topics: ModelTopics | None = None,
    poll_interval_s: float = 0.5,
) -> ModelSubscriber[Policy]:
    """A subscriber serving ``model``: trained versions load with ``policies.gate_net.load_policy``
    (a version that needs extra feature columns is rejected: this replica has no feature
    provider), the fallback is the heuristic v0 (``policies.policy.fallback_policy``). ``topics``:
    the registry's topics (default: the platform's). Raises ServingError when the channels
    topic is missing or the broker is unreachable."""
    from fleet.subscriber import ModelSubscriber
    from flywheel.clients import codec
    from model_registry.registry import DEFAULT_TOPICS
    from policies.gate_net import load_policy
    from policies.policy import fallback_policy

    return ModelSubscriber(
        settings.kafka_client_config(),
        codec(settings),
        model,
        replica_id,
        lambda path, version: load_policy(path, model, version),
        fallback_policy(model),
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


def served(replica: ModelSubscriber[Any]) -> str:
    """``suggestion-gate v3 (canary v4 at 10%)``, or ``suggestion-gate v0 (fallback)``."""
    snapshot = replica.snapshot
    text = f"{replica.model_name} v{replica.serving_version}"
    if snapshot.production is None:
        text += " (fallback)"
    if snapshot.canary is not None:
        text += f" (canary v{snapshot.canary.version} at {snapshot.canary.traffic_fraction:.0%})"
    return text


def status_line(
    replica: ModelSubscriber[Any], decisions: int, per_s: float, noun: str = "decisions"
) -> str:
    """``serving suggestion-gate v3, 12.5 decisions/s, 1,234 total``."""
    return f"serving {served(replica)}, {per_s:,.1f} {noun}/s, {decisions:,} total"


def report_status(
    replica: ModelSubscriber[Any],
    metrics: ServingMetrics,
    every_s: float,
    stop: threading.Event,
    noun: str = "decisions",
) -> None:
    """Print :func:`status_line` every ``every_s`` seconds until ``stop``."""
    last_count, last_t = metrics.decisions, time.monotonic()
    while not stop.wait(every_s):
        count, now = metrics.decisions, time.monotonic()
        per_s = (count - last_count) / max(now - last_t, 1e-9)
        err.print(status_line(replica, count, per_s, noun))
        last_count, last_t = count, now


@click.command()
@click.option(
    "--kind",
    type=click.Choice(["gate", "agent"]),
    default="gate",
    show_default=True,
    help="gate: the suggestion gate's POST /v1/decide; agent: the agent LM's OpenAI API.",
)
@click.option(
    "--model",
    default=None,
    help=f"Model to serve. Default: {DEFAULT_MODEL} (gate), {DEFAULT_AGENT_MODEL} (agent).",
)
@click.option(
    "--replica-id",
    default=None,
    help="This replica's id in acks and metrics. Default: <hostname>-<pid>.",
)
@listen_options(DEFAULT_PORT)
@click.option(
    "--max-batch",
    default=None,
    type=click.IntRange(min=1),
    help="gate: most requests in one POST /v1/decide, more get 413 (default 1000); agent: most "
    "sequences generated together (default 16).",
)
@click.option(
    "--max-queue",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="agent: requests waiting for the engine; more get 429 with Retry-After.",
)
@click.option(
    "--prefix-cache-tokens",
    default=65_536,
    show_default=True,
    type=click.IntRange(min=0),
    help="agent: prompt tokens whose KV cache is kept for reuse across requests (0: off).",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="agent: serve without API keys (local experiments only). Default: keys of "
    "`flywheel gateway add-key`.",
)
@status_every_option(30.0)
@metrics_options
def serve(
    kind: str,
    model: str | None,
    replica_id: str | None,
    host: str,
    port: int,
    max_batch: int | None,
    max_queue: int,
    prefix_cache_tokens: int,
    no_auth: bool,
    status_every_s: float,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Serve a model over HTTP, following the versions the registry points at.

    --kind gate: POST /v1/decide ({"user_id", "context": [floats]} or an array of them)
    answers {"show_probability", "model", "version", "channel"}; until a version is promoted
    the replica serves the heuristic v0. --kind agent: the OpenAI API (POST /v1/completions,
    POST /v1/chat/completions, streaming or not; GET /v1/models) for the agent LM, with API
    keys of `flywheel gateway add-key`; every completion becomes an AgentCompletion event.
    Both: GET /healthz (503 until the channels are read to their end), GET /metrics
    (Prometheus; also on --metrics-port if set). Stops on Ctrl-C or SIGTERM. See
    docs/models.md and docs/serving.md.
    """
    settings = Settings.from_env()
    replica_id = replica_id or default_replica_id()
    sock = listen(host, port)  # before the Kafka clients: a busy port fails fast and clearly
    if kind == "agent":
        app, replica, closers, noun = _agent_app(
            settings, model or DEFAULT_AGENT_MODEL, replica_id, max_batch or 16, max_queue,
            prefix_cache_tokens, no_auth,
        )  # fmt: skip
        routes = "POST /v1/completions, POST /v1/chat/completions, GET /v1/models"
    else:
        from fleet.serving_app import create_app

        model = model or DEFAULT_MODEL
        replica = build_replica(settings, model, replica_id)
        caught_up = threading.Event()
        app = create_app(replica, ready=caught_up.is_set, max_batch=max_batch or 1000)
        app.state.caught_up = caught_up
        closers, noun, routes = [], "decisions", "POST /v1/decide, GET /v1/models"
    _run(app, replica, sock, settings, status_every_s, metrics_port, metrics_host, noun, routes,
         closers)  # fmt: skip


def _agent_app(
    settings: Settings,
    model: str,
    replica_id: str,
    max_batch: int,
    max_queue: int,
    prefix_cache_tokens: int,
    no_auth: bool,
) -> tuple[Any, ModelSubscriber[Any], list[Any], str]:
    """The agent app, its replica, what to close after the server, and the status noun."""
    from fleet.agent_app import create_agent_app
    from fleet.agent_engine import Engine
    from fleet.prefix_cache import PrefixCache
    from fleet.rollout_worker import AgentPolicy, load_agent_policy
    from fleet.subscriber import ModelSubscriber
    from flywheel.clients import codec, telemetry_client
    from streams.gateway.keys import ApiKeyStore, default_key_path

    keys = None if no_auth else ApiKeyStore(default_key_path(settings.home))
    if keys is not None and not any(not r.revoked for r in keys.records()):
        err.print(
            "[yellow]no active API keys[/]: every request will get 401; add one with "
            "`flywheel gateway add-key NAME` (or pass --no-auth for a local experiment)"
        )
    replica: ModelSubscriber[AgentPolicy | None] = ModelSubscriber(
        settings.kafka_client_config(), codec(settings), model, replica_id, load_agent_policy, None
    )
    cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens else None
    engine = Engine(max_batch_rows=max_batch, max_queue=max_queue, prefix_cache=cache)
    client = telemetry_client(settings, f"serve-{replica_id}")
    caught_up = threading.Event()
    app = create_agent_app(
        replica, engine, client.agent_completion, keys=keys, producer=f"serve/{replica_id}",
        ready=caught_up.is_set,
    )  # fmt: skip
    app.state.caught_up = caught_up
    engine.start()
    return app, replica, [engine, client], "completions"


def _run(
    app: Any,
    replica: ModelSubscriber[Any],
    sock: Any,
    settings: Settings,
    status_every_s: float,
    metrics_port: int,
    metrics_host: str,
    noun: str,
    routes: str,
    closers: list[Any],
) -> None:
    """Follow the channels, print status lines and serve ``app`` until Ctrl-C or SIGTERM; then
    close the replica and ``closers`` (the agent's engine, then its event client: its close
    flushes the last completions or spools them)."""
    metrics: ServingMetrics = app.state.metrics
    stop = threading.Event()  # set once the server has stopped (run_server handles signals)
    threads = [
        threading.Thread(target=follow, args=(replica, app.state.caught_up, stop), daemon=True),
        threading.Thread(
            target=report_status, args=(replica, metrics, status_every_s, stop, noun), daemon=True
        ),
    ]
    with metrics_endpoint(metrics_port, metrics_host, metrics.registry):
        for thread in threads:
            thread.start()
        out.print(
            f"[green]serve[/] {replica.model_name} as replica {replica.replica_id} on "
            f"http://{sock.getsockname()[0]}:{sock.getsockname()[1]} ({routes}, GET /healthz, "
            f"GET /metrics), broker {settings.kafka_bootstrap}; Ctrl-C to stop"
        )
        try:
            run_server(app, sock)  # a graceful shutdown on Ctrl-C or SIGTERM
        finally:
            stop.set()
            threads[0].join(timeout=10)
            replica.close()
            for closer in closers:
                closer.close()
            out.print(f"serve stopped: {metrics.decisions:,} {noun}; last served {served(replica)}")
