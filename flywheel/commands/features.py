"""`flywheel features list|run|serve|get`: the feature store (docs/features.md).

The logic lives in `feature_store/`; this module wires it to settings, Kafka, uvicorn and the
terminal.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from flywheel.console import err, out
from flywheel.listen import listen, run_server
from flywheel.logs import ensure_logging
from flywheel.metrics import (
    FeatureProcessorCollector,
    MetricsServer,
    metrics_endpoint,
    metrics_options,
)
from flywheel.options import (
    Duration,
    lake_option,
    listen_options,
    status_every_option,
    topic_option,
)
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals
from flywheel.tables import Column, json_option, print_records
from ground.errors import FlywheelError
from ground.metrics import service_registry
from streams.topics import FEATURE_UPDATES_TOPIC, dlq_topic

DEFAULT_PORT = 8090
_features_file = click.option(
    "--features-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Declarations to use. Default: the shipped feature_store/features.yaml.",
)


def _processor_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        _features_file,
        topic_option(
            "Topics to read, each a declared source or a copy of one (mine=rewards). "
            "Default: the declared sources."
        ),
        click.option(
            "--updates-topic",
            default=FEATURE_UPDATES_TOPIC,
            show_default=True,
            help="Where the FeatureUpdates go.",
        ),
        click.option(
            "--dlq-topic",
            default=dlq_topic("features"),
            show_default=True,
            help="Dead-letter topic: source records that do not decode or validate.",
        ),
        click.option(
            "--history",
            "history_s",
            default="1h",
            show_default=True,
            type=Duration(0.001),
            help="How far behind the latest event online lookups may ask (as_of); bounds memory.",
        ),
        click.option(
            "--flush-every",
            "flush_every_s",
            default="1s",
            show_default=True,
            type=Duration(0.01),
            help="Produce at most one FeatureUpdate per feature and entity this often.",
        ),
        status_every_option(5.0),
        metrics_options,
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group()
def features() -> None:
    """Features declared once, computed online from Kafka and offline from the lake.

    Declarations: feature_store/features.yaml. Python API: feature_store (OnlineFeatureStore,
    historical_features, feature_matrix); see docs/features.md.
    """


VALUE_COLUMNS = (
    Column("feature"),
    Column("value", text=lambda v: "undefined" if v is None else f"{v:.6g}"),
    Column("count"),
)
FEATURE_COLUMNS = (
    Column("feature"), Column("entity_keys", "entity keys", text="+".join), Column("source"),
    Column("aggregation"), Column("window"), Column("ttl"),
)  # fmt: skip


@features.command("list")
@_features_file
@json_option
def list_features(features_file: Path | None, as_json: bool) -> None:
    """Show every declared feature: entity keys, source, aggregation, window, TTL. One line per
    feature when piped; --json for scripts."""
    from feature_store.declarations import load_features

    records = [
        {"feature": f.qualified_name, "entity_keys": list(f.entity.keys), "source": f.source,
         "aggregation": f.aggregation, "window": f.window, "ttl": f"{f.ttl_ms / 3_600_000:g}h"}
        for f in load_features(features_file)
    ]  # fmt: skip
    print_records(records, FEATURE_COLUMNS, as_json=as_json)


@features.command()
@_processor_options
@click.option("--once", is_flag=True, help="Read the topics to their end, flush and exit.")
def run(once: bool, **options: Any) -> None:
    """Compute features online and produce FeatureUpdates (no HTTP; see `serve`).

    Reads the source topics from the beginning (the state is rebuilt from them), prints a
    status line every --status-every and stops on Ctrl-C or, with --once, when caught up.
    """
    processor = _processor(**options)
    stop = stop_on_signals()
    out.print(
        f"[green]features[/] reading {', '.join(processor_topics(processor))}; updates to "
        f"{options['updates_topic']}{' (once)' if once else '; Ctrl-C to stop'}"
    )
    with _metrics(processor, options):
        status = processor.run(
            stop.is_set,
            lambda s: err.print(s.line()),
            until_caught_up=once,
            progress_every_s=options["status_every_s"],
        )
    out.print(f"features stopped: {status.records:,} records, {status.updates:,} updates")


@features.command()
@_processor_options
@listen_options(DEFAULT_PORT)
def serve(host: str, port: int, **options: Any) -> None:
    """Compute features online and serve them over HTTP until Ctrl-C.

    GET /features/<entity_type>/<entity_id>, POST /features/<entity_type> (a list of ids),
    GET /healthz (503 until the processor has caught up).
    """
    from feature_store.service import create_app

    processor = _processor(**options)
    sock = listen(host, port)
    stop = threading.Event()
    worker = threading.Thread(
        target=processor.run,
        args=(stop.is_set, lambda s: err.print(s.line())),
        kwargs={"progress_every_s": options["status_every_s"]},
        name="feature-processor",
        daemon=True,
    )
    app = create_app(processor.store, ready=lambda: processor.status.caught_up)
    with _metrics(processor, options):  # a busy metrics port fails before the worker starts
        worker.start()
        out.print(
            f"[green]features[/] on http://{host}:{port} (GET /features/<type>/<id>, POST "
            f"/features/<type>, GET /healthz), reading {', '.join(processor_topics(processor))}"
        )
        try:
            run_server(app, sock)
        finally:
            stop.set()
            worker.join(timeout=30)


@features.command()
@click.argument("entity_type")
@click.argument("entity_id")
@click.option("--features", "names", default=None, help="Comma-separated names (default: all).")
@click.option("--as-of", default=None, help="Epoch ms or ISO 8601 with a zone. Default: now.")
@click.option(
    "--url",
    default=f"http://127.0.0.1:{DEFAULT_PORT}",
    show_default=True,
    help="Base URL of `flywheel features serve`.",
)
@click.option("--offline", is_flag=True, help="Compute from the lake instead of asking `serve`.")
@lake_option(stores=False, what=" for --offline")
@_features_file
@json_option
def get(
    entity_type: str,
    entity_id: str,
    names: str | None,
    as_of: str | None,
    url: str,
    offline: bool,
    lake: Path | None,
    features_file: Path | None,
    as_json: bool,
) -> None:
    """Show one entity's feature values, online (from `flywheel features serve`) or --offline.

    ENTITY_TYPE is a declared entity (user, user_language, model_version, ...); ENTITY_ID joins
    composite keys with @ (user_language: <user_id>@<language>;
    model_version: <model_name>@<version>).
    """
    wanted = [n.strip() for n in names.split(",")] if names else None
    if offline:
        rows = _offline_values(entity_type, entity_id, wanted, as_of, lake, features_file)
    else:
        rows = _online_values(url, entity_type, entity_id, wanted, as_of)
    records = [{"feature": n, "value": v, "count": c} for n, v, c in rows]
    print_records(records, VALUE_COLUMNS, as_json=as_json)


def _online_values(
    url: str, entity_type: str, entity_id: str, names: list[str] | None, as_of: str | None
) -> list[tuple[str, float | None, int]]:
    query = {k: v for k, v in {"features": ",".join(names or []), "as_of": as_of}.items() if v}
    path = f"/features/{urllib.parse.quote(entity_type)}/{urllib.parse.quote(entity_id)}"
    target = url.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    try:
        with urllib.request.urlopen(target, timeout=10) as response:  # noqa: S310 (http only)
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        reason = json.loads(exc.read() or b"{}").get("error", exc.reason)
        raise click.ClickException(f"{exc.code}: {reason}") from None
    except urllib.error.URLError as exc:
        raise click.ClickException(
            f"cannot reach {url} ({exc.reason}); start it with `flywheel features serve`, "
            "or pass --offline to compute from the lake"
        ) from None
    err.print(f"as of {body['as_of']}")
    return [(n, v["value"], v["count"]) for n, v in body["features"].items()]


def _offline_values(
    entity_type: str,
    entity_id: str,
    names: list[str] | None,
    as_of: str | None,
    lake: Path | None,
    features_file: Path | None,
) -> list[tuple[str, float | None, int]]:
    import pyarrow as pa

    from feature_store.declarations import load_features
    from feature_store.offline import historical_features

    feature_set = load_features(features_file)
    chosen = feature_set.for_entity(entity_type, names)
    keys = chosen[0].entity.keys if chosen else ()
    parts = entity_id.split("@", len(keys) - 1) if keys else []
    if len(parts) != len(keys):
        raise click.BadParameter(f"{entity_type} ids join {' and '.join(keys)} with @")
    t = _parse_as_of(as_of)
    table = pa.table({**{k: [p] for k, p in zip(keys, parts, strict=True)}, "event_time": [t]})
    if "model_version" in keys:
        table = table.set_column(
            keys.index("model_version"),
            "model_version",
            pa.array([int(parts[keys.index("model_version")])]),
        )
    lake_dir = lake or Settings.from_env().lake
    result = historical_features(
        table, [f.qualified_name for f in chosen], lake_dir, feature_set=feature_set
    ).to_pylist()[0]
    err.print(f"as of {datetime.fromtimestamp(t / 1000, UTC).isoformat()} from {lake_dir}")
    return [(f.qualified_name, result[f.qualified_name], result[f"{f.qualified_name}__count"])
            for f in chosen]  # fmt: skip


def _parse_as_of(raw: str | None) -> int:
    if raw is None:
        return int(datetime.now(UTC).timestamp() * 1000)
    from feature_store.service import parse_as_of

    try:
        value = parse_as_of(raw)
    except ValueError:
        raise click.BadParameter(
            f"--as-of {raw!r}: give epoch ms or ISO 8601 with a zone"
        ) from None
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


def _processor(
    features_file: Path | None,
    topics: dict[str, str | None],
    updates_topic: str,
    dlq_topic: str,
    history_s: float,
    flush_every_s: float,
    **_: Any,
) -> Any:
    """A FeatureProcessor from the CLI options (Kafka imported only here, not for --help)."""
    from feature_store.declarations import load_features
    from feature_store.online import OnlineFeatureStore
    from feature_store.processor import FeatureProcessor
    from flywheel.clients import codec as make_codec

    ensure_logging("features")
    history_ms = round(history_s * 1000)
    settings = Settings.from_env()
    try:
        feature_set = load_features(features_file)
        codec = make_codec(settings)
        codec.register(FEATURE_UPDATES_TOPIC)  # fails fast, naming the fix, if the registry is down
        store = OnlineFeatureStore(feature_set, history_ms=history_ms)
        return FeatureProcessor(
            settings.kafka_client_config(),
            codec,
            store,
            topics={name: schema or name for name, schema in topics.items()} or None,
            updates_topic=updates_topic,
            dlq=dlq_topic,
            producer_name=f"feature_store.online/{socket.gethostname()}",
            flush_every_s=flush_every_s,
        )
    except FlywheelError as exc:
        raise click.ClickException(str(exc)) from exc


def _metrics(
    processor: Any, options: dict[str, Any]
) -> AbstractContextManager[MetricsServer | None]:
    """The processor's metrics endpoint (``--metrics-port``) for a ``with`` block."""
    registry = service_registry(FeatureProcessorCollector(lambda: processor.status))
    return metrics_endpoint(options["metrics_port"], options["metrics_host"], registry)


def processor_topics(processor: Any) -> list[str]:
    return [f"{t}" if t == s else f"{t} (as {s})" for t, s in processor.topics.items()]
