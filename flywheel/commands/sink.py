"""`flywheel sink`: every platform topic into the Parquet lake, exactly once (docs/lake.md)."""

from __future__ import annotations

import socket

import click

from flywheel.console import err, out
from flywheel.logs import ensure_logging
from flywheel.metrics import SinkCollector, metrics_endpoint, metrics_options
from flywheel.options import (
    Duration,
    lake_option,
    resolve_topics,
    status_every_option,
    topic_option,
)
from flywheel.settings import Settings
from flywheel.signals import stop_on_signals
from ground.errors import FlywheelError
from ground.metrics import service_registry
from streams.topics import LAKE_TOPIC_SCHEMAS, TOPIC_VALUE_SCHEMAS, dlq_topic

MIB = 1024 * 1024
# DESIGN §3's data topics: every topic with a platform event (the dlq.* topics hold raw bytes)
# but the codebase index's (hashes and embedding bytes, no analyst rows; docs/lake.md).
DEFAULT_TOPICS = tuple(LAKE_TOPIC_SCHEMAS)


@click.command()
@topic_option("Topics to sink. Default: every platform topic with events (not dlq.*, not index.*).")
@lake_option(stores=True)
@click.option(
    "--group", default="flywheel.lake-sink", show_default=True, help="Kafka consumer group."
)
@click.option(
    "--instance-id",
    default=None,
    help="Static group membership id: a restarted sink gets its partitions back at once. "
    "Give each sink of one group its own. Default: <host name>-lake-sink.",
)
@click.option(
    "--dlq-topic",
    default=dlq_topic("sink"),
    show_default=True,
    help="Dead-letter topic: records that do not decode or validate, with the cause.",
)
@click.option(
    "--max-rows",
    default=50_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rotate a buffer (write its file) at this many rows.",
)
@click.option(
    "--max-mib",
    default=64.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Rotate a buffer at this estimated in-memory size.",
)
@click.option(
    "--max-age",
    "max_age_s",
    default="30s",
    show_default=True,
    type=Duration(0, min_open=True),
    help="Rotate a buffer this long after its first record, so data becomes visible.",
)
@click.option(
    "--memory-mib",
    default=512.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Budget of all buffers together; over it the largest is written.",
)
@click.option(
    "--max-record-bytes",
    default=MIB,
    show_default=True,
    type=click.IntRange(min=1),
    help="Larger records are dead letters (cause oversized), never decoded.",
)
@click.option("--once", is_flag=True, help="Sink what is there, then write, commit and exit.")
@status_every_option(5.0)
@metrics_options
def sink(
    topics: dict[str, str | None],
    lake: str | None,
    group: str,
    instance_id: str | None,
    dlq_topic: str,
    max_rows: int,
    max_mib: float,
    max_age_s: float,
    memory_mib: float,
    max_record_bytes: int,
    once: bool,
    status_every_s: float,
    metrics_port: int,
    metrics_host: str,
) -> None:
    """Write every platform topic to hour-partitioned Parquet in the lake, exactly once.

    Files appear at lake/<topic>/dt=YYYY-MM-DD/hour=HH/<topic>+<partition>+<first>+<last>.parquet;
    records that do not decode or validate go to the DLQ topic with headers naming the cause.
    Ctrl-C (or SIGTERM) writes the buffers, commits and exits; a crash loses nothing: the next
    start resumes from the files in the lake.
    """
    # Imported here so `--help` does not load the Kafka client and pyarrow.
    from flywheel.clients import codec as make_codec
    from processors.lake import LakeSink, RotationLimits

    ensure_logging("sink")
    settings = Settings.from_env()
    chosen = resolve_topics(topics, TOPIC_VALUE_SCHEMAS) if topics else {}
    names = list(chosen) or list(DEFAULT_TOPICS)
    decode_as = {name: schema for name, schema in chosen.items() if schema != name}
    try:
        limits = RotationLimits(max_rows, int(max_mib * MIB), max_age_s, int(memory_mib * MIB))
        store = settings.lake_store(lake)
        codec = make_codec(settings)
        for schema_topic in {decode_as.get(t, t) for t in names} & set(TOPIC_VALUE_SCHEMAS):
            codec.register(schema_topic)  # fails fast, naming the fix, if the registry is down
        lake_sink = LakeSink(
            settings.kafka_client_config(),
            codec,
            store,
            names,
            group_id=group,
            limits=limits,
            dlq_topic=dlq_topic,
            max_record_bytes=max_record_bytes,
            decode_as=decode_as,
            instance_id=instance_id or f"{socket.gethostname()}-lake-sink",
        )
        registry = service_registry(SinkCollector(lambda: lake_sink.status))
        with metrics_endpoint(metrics_port, metrics_host, registry):
            stop = stop_on_signals()
            out.print(
                f"[green]sink[/] {len(names)} topic(s) -> {store} (group {group}, dead "
                f"letters to {dlq_topic}){'; draining once' if once else '; Ctrl-C to stop'}"
            )
            status = lake_sink.run(
                stop,
                lambda s: err.print(s.line()),
                until_caught_up=once,
                progress_every_s=status_every_s,
            )
    except FlywheelError as exc:  # also when run as the crash-hook script, outside the CLI group
        raise click.ClickException(str(exc)) from exc
    out.print(
        f"sink stopped: {status.rows:,} rows in {status.files:,} files, "
        f"{sum(status.dead_letters.values()):,} dead letters, offsets committed"
    )
