"""`flywheel privacy erase|retain`: remove a user's rows from the lake; apply lake retention."""

from __future__ import annotations

import click

from flywheel import clients
from flywheel.console import out
from flywheel.options import Duration
from flywheel.privacy import erase_everywhere
from flywheel.settings import Settings
from processors.lake.erasure import retain


@click.group()
def privacy() -> None:
    """Erase a user (lake, dead letters, training windows, online features); lake retention
    (docs/operations.md)."""


@privacy.command()
@click.option("--user", "user", required=True, help="The user's pseudonym (as stored).")
@click.option(
    "--raw", is_flag=True,
    help="--user is the raw id: pseudonymize it with the platform key (FLYWHEEL_PSEUDONYM_KEY).",
)  # fmt: skip
def erase(user: str, raw: bool) -> None:
    """Remove a user's rows from every lake table that holds them (telemetry, the agent's
    completions and feedback, rewards, feature updates) and from the dead-letter topics, drop
    the learner's MDS windows built from them, then record the erasure on privacy.erasures
    (feature processors drop the user's online features on it).

    Lake files are rewritten atomically under their own names (offset ranges stay valid); a
    dropped window's other rows are converted again by the learner's next build. The other
    Kafka topics keep the user's events until their retention deletes them; replaying consumers
    skip them (docs/operations.md). Needs Kafka and the registry; idempotent.
    """
    settings = Settings.from_env()
    user_id = clients.pseudonymizer(settings).pseudonym("user", user) if raw else user
    report = erase_everywhere(settings, user_id)
    for topic, rows in {**report.rows_removed, **report.dead_letters_removed}.items():
        what = "dead letters" if topic.startswith("dlq.") else "rows"
        out.print(f"{topic:<24} {rows:>8,} {what} removed")
    for window in report.windows_dropped:
        out.print(f"{window:<40} training window dropped (rebuilt without the user)")
    out.print(
        f"erasure {report.erasure_id}: {sum(report.rows_removed.values()):,} rows in "
        f"{len(report.files_rewritten)} files, {sum(report.dead_letters_removed.values()):,} "
        f"dead letters, {len(report.windows_dropped)} training windows; recorded on "
        "privacy.erasures"
    )


@privacy.command("retain")
@click.option(
    "--older-than", "older_than_s", required=True, type=Duration(0, min_open=True),
    help="Delete lake hour folders whose hour ended more than this long ago (30d, 12h).",
)  # fmt: skip
def retain_(older_than_s: float) -> None:
    """Delete whole lake hour folders older than --older-than (each partition's newest file
    stays)."""
    settings = Settings.from_env()
    report = retain(settings.lake_store(), older_than_s / 86_400)
    for folder in report.kept_for_resume:
        out.print(f"kept {folder}: it holds a partition's newest file (the sink resumes from it)")
    out.print(f"{len(report.deleted)} hour folders deleted from {settings.lake_uri}")
