"""`flywheel topics list|create`: the topics of DESIGN §3, declared in `streams.topics`."""

from __future__ import annotations

import sys

import click

from flywheel.commands.stack import print_topic_report
from flywheel.settings import Settings
from flywheel.tables import Column, json_option, print_records
from streams.admin import TopicAdmin
from streams.topics import ALL_TOPICS


@click.group()
def topics() -> None:
    """Create and check the platform's topics."""


COLUMNS = (
    Column("topic"), Column("key"), Column("value"), Column("partitions"), Column("cleanup"),
    Column("state", styles={"missing": "red", "drift": "yellow", "ok": "green"}),
)  # fmt: skip


@topics.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Show each declared topic, its contract and whether it exists as declared (state: ok,
    drift or missing). One line per topic when piped; --json for scripts."""
    settings = Settings.from_env()
    admin = TopicAdmin(settings.kafka_client_config())
    present = admin.existing_partitions()
    drifted = {d.topic for d in admin.drift(ALL_TOPICS)}
    records = [
        {
            "topic": spec.name, "key": spec.key, "value": spec.value,
            "partitions": spec.partitions, "cleanup": spec.cleanup_policy,
            "state": "missing" if spec.name not in present
            else "drift" if spec.name in drifted
            else "ok",
        }
        for spec in ALL_TOPICS
    ]  # fmt: skip
    print_records(records, COLUMNS, as_json=as_json)


@topics.command()
def create() -> None:
    """Create missing topics (idempotent) and report drift; exits 1 if any topic drifted."""
    settings = Settings.from_env()
    report = TopicAdmin(settings.kafka_client_config()).ensure(ALL_TOPICS)
    print_topic_report(report)
    if report.drift:
        sys.exit(1)
