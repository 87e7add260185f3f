"""`flywheel stack up|down|status|s3-env`: the embedded local broker, schema registry and object
store."""

from __future__ import annotations

import shlex
import time

import click

from flywheel.console import err, out
from flywheel.errors import SettingsError
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings, public_url
from flywheel.tables import Column, json_option, note, print_records
from streams.admin import TopicReport
from streams.stack.local import LocalStack


@click.group()
def stack() -> None:
    """Run the local Kafka broker (KRaft), Apicurio schema registry and S3 object store."""


def _external_note(settings: Settings) -> None:
    out.print(
        f"External cluster configured (FLYWHEEL_BOOTSTRAP_SERVERS={settings.kafka_bootstrap}, "
        f"FLYWHEEL_SCHEMA_REGISTRY_URL={public_url(settings.registry_url)}): "
        "no local stack is managed."
    )


def print_topic_report(report: TopicReport) -> None:
    """One line for created / existing topics, then each drift with its fix."""
    out.print(f"topics: {len(report.created)} created, {len(report.existing)} already there")
    for drift in report.drift:
        out.print(
            f"[yellow]drift[/] {drift.topic}: {drift.setting} is {drift.actual}, "
            f"declared {drift.declared}; fix: {drift.fix()}"
        )


@stack.command()
def up() -> None:
    """Start the broker, registry and object store (idempotent), wait until they answer, create
    topics.

    Artifacts are resolved from Maven Central on first use. Data, topics, schemas and objects
    survive `down`/`up`. The object store (S3Proxy) serves the bucket `flywheel`; `flywheel stack
    s3-env` prints its credentials. Nothing is started when an external cluster is configured.
    """
    settings = Settings.from_env()
    started_at = time.perf_counter()
    with err.status("starting the local stack") as status:
        report = ensure_infrastructure(settings, lambda msg: status.update(msg))
    if settings.uses_local_stack:
        for line in LocalStack(settings.home, settings.ports).status():
            out.print(f"[green]up[/] {line.name} {line.version} at {line.address}")
    else:
        _external_note(settings)
    print_topic_report(report)
    out.print(f"ready in {time.perf_counter() - started_at:.1f}s")


@stack.command()
def down() -> None:
    """Stop the broker, registry and object store this state directory started. Data is kept."""
    settings = Settings.from_env()
    if not settings.uses_local_stack:
        _external_note(settings)
        return
    with err.status("stopping the local stack") as status:
        stopped = LocalStack(settings.home, settings.ports, lambda m: status.update(m)).down()
    out.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


STATUS_COLUMNS = (
    Column("service"),
    Column("running", "state", text=lambda r: "running" if r else "stopped",
           styles={"running": "green", "stopped": "red"}),
    Column("pid"), Column("address"), Column("version"), Column("log"),
)  # fmt: skip


@stack.command()
@json_option
def status(as_json: bool) -> None:
    """Show what runs, where, which versions, and where the logs are.

    On a terminal: a table. Piped or redirected: one tab-separated line per service with whole
    values (no column is cut to the terminal's width). --json for scripts.
    """
    settings = Settings.from_env()
    if not settings.uses_local_stack:
        if as_json:  # no service runs here: an empty list, the why on stderr
            print_records([], STATUS_COLUMNS, as_json=True)
        else:
            _external_note(settings)
        note(f"client configuration: {settings.masked_kafka_config()}", as_json=as_json)
        return
    local = LocalStack(settings.home, settings.ports)
    records = [
        {"service": s.name, "running": s.running, "pid": s.pid, "address": s.address,
         "version": s.version, "log": str(s.log)}
        for s in local.status()
    ]  # fmt: skip
    print_records(records, STATUS_COLUMNS, as_json=as_json)
    note(f"state directory: {settings.home}", as_json=as_json)
    store = local.s3
    note(
        f"object store: s3://{store.bucket} at {store.endpoint}; credentials in "
        f"{store.credentials_file} (`flywheel stack s3-env` prints them as exports)",
        as_json=as_json,
    )


@stack.command("s3-env")
def s3_env() -> None:
    """Print `export` lines that point a shell at the local object store: its key pair (the
    secret included), endpoint and region, for Flywheel, the AWS CLI, boto3, pyarrow and
    mosaicml-streaming. Use: eval "$(flywheel stack s3-env)".

    The key pair is generated on first use (`stack up` does it too) and kept in
    <FLYWHEEL_HOME>/stack/s3/credentials (mode 0600). Fails with an external cluster configured:
    set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and FLYWHEEL_S3_ENDPOINT for your own store.
    """
    settings = Settings.from_env()
    if not settings.uses_local_stack:
        raise SettingsError(
            "an external cluster is configured, so no local object store is managed: set "
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and FLYWHEEL_S3_ENDPOINT for your store"
        )
    store = LocalStack(settings.home, settings.ports).s3
    for name, value in store.client_environment().items():
        click.echo(f"export {name}={shlex.quote(value)}")
