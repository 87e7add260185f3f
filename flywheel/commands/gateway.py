"""`flywheel gateway serve|add-key|revoke-key|list-keys`: the HTTP ingestion gateway.

The app is `streams.gateway.create_app` (docs/gateway.md); this module only wires it to the SDK,
the key file under FLYWHEEL_HOME and uvicorn.
"""

from __future__ import annotations

import click

from flywheel.console import err, out
from flywheel.listen import listen, run_server
from flywheel.options import listen_options
from flywheel.settings import Settings
from flywheel.tables import Column, json_option, note, print_records
from streams.gateway.keys import ApiKeyStore, default_key_path
from streams.gateway.parsing import GATEWAY_EVENT_TYPES


def _store() -> ApiKeyStore:
    return ApiKeyStore(default_key_path(Settings.from_env().home))


@click.group()
def gateway() -> None:
    """Receive events over HTTP (POST /v1/events) and produce them through the SDK.

    API keys live hashed in $FLYWHEEL_HOME/gateway/keys.json; see docs/gateway.md.
    """


@gateway.command()
@listen_options(8088)
@click.option(
    "--max-body-bytes",
    default=1_048_576,
    show_default=True,
    type=click.IntRange(min=1),
    help="Largest request body; larger ones get 413.",
)
@click.option(
    "--max-events",
    default=5000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most events in one request; more get 413.",
)
def serve(host: str, port: int, max_body_bytes: int, max_events: int) -> None:
    """Serve the gateway until Ctrl-C, then flush and close the SDK client.

    Events the broker has not acknowledged by then are kept in the SDK's spool
    ($FLYWHEEL_HOME/spool/gateway) and sent by the next `serve`.
    """
    # Imported here: the SDK pulls in the Kafka client, which the key commands do not need.
    from flywheel.clients import telemetry_client
    from streams.gateway.app import create_app

    settings = Settings.from_env()
    keys = ApiKeyStore(default_key_path(settings.home))
    active = [r for r in keys.records() if not r.revoked]
    if not active:
        err.print(
            "[yellow]no active API keys[/]: every request will get 401; "
            "add one with `flywheel gateway add-key NAME`"
        )
    sock = listen(host, port)  # before the client starts: a busy port fails fast and clearly
    client = telemetry_client(settings, name="gateway")
    app = create_app(client, keys, max_body_bytes=max_body_bytes, max_events=max_events)
    out.print(
        f"[green]gateway[/] on http://{host}:{port} (POST /v1/events, GET /healthz, "
        f"GET /metrics), {len(active)} active key(s), broker {settings.kafka_bootstrap}; "
        "Ctrl-C to stop"
    )
    try:
        run_server(app, sock)
    finally:
        stats = client.close()
        out.print(
            f"gateway stopped: {stats.acked} event(s) acknowledged, {stats.spooled} spooled "
            f"for the next start, {stats.failed} failed"
        )


@gateway.command("add-key")
@click.argument("name")
@click.option(
    "--types",
    "types",
    multiple=True,
    metavar="TYPE[,TYPE...]",
    help=f"Event types the key may send (repeat or comma-separate). "
    f"Default: all of {', '.join(GATEWAY_EVENT_TYPES)}.",
)
def add_key(name: str, types: tuple[str, ...]) -> None:
    """Create API key NAME and print its secret (on stdout, once: only its hash is kept).

    Events sent with it default to producer `gateway/NAME`.
    """
    wanted = [t.strip() for group in types for t in group.split(",") if t.strip()]
    store = _store()
    secret = store.add(name, wanted or None)
    record = next(r for r in store.records() if r.name == name)
    err.print(f"created key [bold]{name}[/] for {', '.join(record.event_types)}")
    click.echo(secret)
    err.print("Store the secret now: it is shown only this once.")


@gateway.command("revoke-key")
@click.argument("name")
def revoke_key(name: str) -> None:
    """Revoke API key NAME: requests with it get 403, also on a running gateway."""
    _store().revoke(name)
    out.print(f"revoked key [bold]{name}[/]")


KEY_COLUMNS = (
    Column("name"), Column("event_types", "event types"), Column("created"),
    Column("state", styles={"active": "green", "revoked": "red"}),
)  # fmt: skip


@gateway.command("list-keys")
@json_option
def list_keys(as_json: bool) -> None:
    """Show each API key's name, event types, creation time and state (never secrets). One
    line per key when piped; --json for scripts."""
    store = _store()
    records = [
        {"name": r.name, "event_types": list(r.event_types), "created": r.created_at,
         "state": "revoked" if r.revoked else "active"}
        for r in store.records()
    ]  # fmt: skip
    if not records:
        note(
            f"no keys in {store.path}; add one with `flywheel gateway add-key NAME`",
            as_json=as_json,
        )
    print_records(records, KEY_COLUMNS, as_json=as_json)
