"""`flywheel doctor`: check configuration, connectivity, topic drift and registry compatibility."""

from __future__ import annotations

import sys

import click

from flywheel.doctor import CHECKS, DEFAULT_TIMEOUT_S, run_checks
from flywheel.options import Duration, duration_text
from flywheel.tables import Column, json_option, note, print_records

COLUMNS = (
    Column("check"),
    Column("ok", text=lambda ok: "ok" if ok else "FAIL", styles={"ok": "green", "FAIL": "red"}),
    Column("detail"),
    Column("fix"),
)


@click.command()
@click.option(
    "--check", "only", multiple=True, type=click.Choice(CHECKS),
    help="Run only this check (repeatable; topics and schemas first check their server). "
    "Default: all.",
)  # fmt: skip
@click.option(
    "--timeout", "timeout_s", default=duration_text(DEFAULT_TIMEOUT_S), show_default=True,
    type=Duration(0.1),
    help="How long to wait for the broker and the registry.",
)  # fmt: skip
@json_option
def doctor(only: tuple[str, ...], timeout_s: float, as_json: bool) -> None:
    """Check configuration, Kafka and registry connectivity, topic drift, schema compatibility
    and the sandbox for model-written code; print each failure with its fix and exit 1 if any
    check failed.

    One line per check when piped; --json for scripts. Secrets are never printed. Also the
    healthcheck of the compose services (`flywheel doctor --check config --check kafka`).
    """
    results = run_checks(only=only or CHECKS, timeout_s=timeout_s)
    records = [
        {"check": r.check, "ok": r.ok, "detail": r.detail, "fix": r.fix or None} for r in results
    ]
    print_records(records, COLUMNS, as_json=as_json)
    failed = sum(not r.ok for r in results)
    note(f"{len(results) - failed} passed, {failed} failed", as_json=as_json)
    if failed:
        sys.exit(1)
