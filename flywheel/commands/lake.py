"""`flywheel lake compact`: merge closed hours' small lake files into large ones (docs/lake.md)."""

from __future__ import annotations

import click
from rich.progress import Progress, TaskID

from flywheel.console import err
from flywheel.options import ByteSize, Duration, lake_option
from flywheel.settings import Settings
from flywheel.tables import Column, json_option, note, print_records

COLUMNS = ("topic", "runs", "files_before", "files_after", "bytes_before", "bytes_after")


@click.group()
def lake() -> None:
    """Maintain the Parquet lake: compaction (docs/lake.md#compaction)."""


@lake.command()
@lake_option(stores=True)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="A topic to compact (repeatable). Default: every topic directory of the lake.",
)
@click.option(
    "--min-age",
    "min_age_s",
    type=Duration(),
    default="1h",
    show_default=True,
    help="Compact only hours that ended at least this long ago (90s, 5m, 2h, 30d); keep it "
    "well above the sink's --max-age.",
)
@click.option(
    "--target-size",
    "target_bytes",
    type=ByteSize(),
    default="128MiB",
    show_default=True,
    help="Merge files smaller than this into files of at most this size (128MiB, 1GiB, bytes).",
)
@click.option(
    "--retention",
    "retention_s",
    type=Duration(),
    default=None,
    help="First delete hour folders that ended longer ago than this (e.g. 30d), as "
    "`flywheel privacy retain` does. Default: keep everything.",
)
@click.option("--dry-run", is_flag=True, help="Change nothing; report what would be done.")
@json_option
def compact(
    lake: str | None, topics: tuple[str, ...], min_age_s: float, target_bytes: int,
    retention_s: float | None, dry_run: bool, as_json: bool,
) -> None:  # fmt: skip
    """Merge each closed hour's small files, per topic and partition, into a few large ones.

    Safe while the sink writes: only contiguous files of one hour directory are merged, into a
    file named by their whole offset range, so the sink's resume point, erasure and the learner
    stay correct (what the views see meanwhile: docs/lake.md#compaction). Holds the lake's
    maintenance lock (erasure and retention wait for it) and first deletes what a crashed
    compaction left. Progress goes to stderr.
    """
    from processors.lake.compaction import compact_lake

    root = Settings.from_env().lake_store(lake)  # a directory or an s3:// prefix
    with Progress(console=err, transient=True, disable=as_json) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(topic: str, done: int, total: int) -> None:
            if topic not in tasks:
                tasks[topic] = bar.add_task(topic, total=total)
            bar.update(tasks[topic], completed=done)

        report = compact_lake(
            root, list(topics) or None, min_age_s=min_age_s, target_bytes=target_bytes,
            retention_days=None if retention_s is None else retention_s / 86400,
            dry_run=dry_run, progress=progress,
        )  # fmt: skip
    rows = [
        {"topic": t, "runs": s.runs, "files_before": s.files_before, "files_after": s.files_after,
         "bytes_before": s.bytes_before, "bytes_after": s.bytes_after}
        for t, s in report.topics.items()
    ]  # fmt: skip
    dropped = [] if report.retention is None else [str(p) for p in report.retention.deleted]
    print_records(rows, [Column(k) for k in COLUMNS], as_json=as_json)
    before = sum(s.files_before for s in report.topics.values())
    after = sum(s.files_after for s in report.topics.values())
    verb = "would merge" if dry_run else "merged"
    what = f"{verb} {before:,} files into {after:,} in {root}"
    if dropped or report.retention is not None:
        what += (
            f"; retention {'would delete' if dry_run else 'deleted'} {len(dropped)} hour folders"
        )
    note(what, as_json=as_json)
