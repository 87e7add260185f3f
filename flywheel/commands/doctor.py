"""`flywheel doctor`: check configuration, connectivity, topic drift and registry compatibility."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from flywheel.console import out
from flywheel.doctor import CHECKS, DEFAULT_TIMEOUT_S, run_checks
from flywheel.options import Duration, duration_text


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
def doctor(only: tuple[str, ...], timeout_s: float) -> None:
    """Check configuration, Kafka and registry connectivity, topic drift, schema compatibility
    and the sandbox for model-written code; print each failure with its fix and exit 1 if any
    check failed.

    Secrets are never printed. Also the healthcheck of the compose services
    (`flywheel doctor --check config --check kafka`).
    """
    results = run_checks(only=only or CHECKS, timeout_s=timeout_s)
    for result in results:
        mark = "[green]ok[/]  " if result.ok else "[red]FAIL[/]"
        out.print(f"{mark} {result.check:<8} {escape(result.detail)}")
        if not result.ok and result.fix:
            out.print(f"              fix: {escape(result.fix)}")
    failed = sum(not r.ok for r in results)
    out.print(f"{len(results) - failed} passed, {failed} failed")
    if failed:
        sys.exit(1)
