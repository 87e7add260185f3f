"""`flywheel topics list|create`: the topics of DESIGN §3, declared in `streams.topics`."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from flywheel.commands.stack import print_topic_report
from flywheel.console import out
from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.topics import ALL_TOPICS


@click.group()
def topics() -> None:
    """Create and check the platform's topics."""


@topics.command("list")
def list_() -> None:
    """Show each declared topic, its contract and whether it exists as declared."""
    settings = Settings.from_env()
    admin = TopicAdmin(settings.kafka_client_config())
    present = admin.existing_partitions()
    drifted = {d.topic for d in admin.drift(ALL_TOPICS)}
    table = Table("topic", "key", "value", "partitions", "cleanup", "state")
    for spec in ALL_TOPICS:
        state = (
            "[red]missing[/]" if spec.name not in present
            else "[yellow]drift[/]" if spec.name in drifted
            else "[green]ok[/]"
        )  # fmt: skip
        table.add_row(
            spec.name, spec.key, spec.value, str(spec.partitions), spec.cleanup_policy, state
        )
    out.print(table)


@topics.command()
def create() -> None:
    """Create missing topics (idempotent) and report drift; exits 1 if any topic drifted."""
    settings = Settings.from_env()
    report = TopicAdmin(settings.kafka_client_config()).ensure(ALL_TOPICS)
    print_topic_report(report)
    if report.drift:
        sys.exit(1)
