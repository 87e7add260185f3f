"""`flywheel stack up|down|status`: the embedded local broker and schema registry."""

from __future__ import annotations

import json
import time

import click
from rich.table import Table

from flywheel.console import err, out
from flywheel.platform import ensure_infrastructure
from flywheel.settings import Settings, public_url
from streams.admin import TopicReport
from streams.stack.local import LocalStack


@click.group()
def stack() -> None:
    """Run the local Kafka broker (KRaft) and Apicurio schema registry."""


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
    """Start the broker and registry (idempotent), wait until both answer, create topics.

    Artifacts are resolved from Maven Central on first use. Data, topics and schemas survive
    `down`/`up`. Nothing is started when an external cluster is configured.
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
    """Stop the broker and registry this state directory started. Data is kept."""
    settings = Settings.from_env()
    if not settings.uses_local_stack:
        _external_note(settings)
        return
    with err.status("stopping the local stack") as status:
        stopped = LocalStack(settings.home, settings.ports, lambda m: status.update(m)).down()
    out.print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")


@stack.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: services and state dir.")
def status(as_json: bool) -> None:
    """Show what runs, where, which versions, and where the logs are.

    On a terminal: a table. Piped or redirected: one tab-separated line per service with whole
    values (no column is cut to the terminal's width). --json for scripts.
    """
    settings = Settings.from_env()
    if not settings.uses_local_stack:
        _external_note(settings)
        out.print(f"client configuration: {settings.masked_kafka_config()}")
        return
    services = LocalStack(settings.home, settings.ports).status()
    if as_json:
        rows = [
            {"service": s.name, "running": s.running, "pid": s.pid, "address": s.address,
             "version": s.version, "log": str(s.log)}
            for s in services
        ]  # fmt: skip
        click.echo(json.dumps({"services": rows, "state_directory": str(settings.home)}))
        return
    if not out.is_terminal:
        click.echo("\t".join(("service", "state", "pid", "address", "version", "log")))
        for s in services:
            state = "running" if s.running else "stopped"
            click.echo(
                "\t".join((s.name, state, str(s.pid or "-"), s.address, s.version, str(s.log)))
            )
        click.echo(f"state directory: {settings.home}")
        return
    table = Table("service", "state", "pid", "address", "version", "log")
    for s in services:
        state = "[green]running[/]" if s.running else "[red]stopped[/]"
        table.add_row(s.name, state, str(s.pid or "-"), s.address, s.version, str(s.log))
    out.print(table)
    out.print(f"state directory: {settings.home}")
