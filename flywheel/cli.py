"""`flywheel`: the command line. Each command group lives in `flywheel/commands/`."""

from __future__ import annotations

from typing import Any

import click

from flywheel import logs
from flywheel.commands.demo import demo
from flywheel.commands.doctor import doctor
from flywheel.commands.features import features
from flywheel.commands.gateway import gateway
from flywheel.commands.learn import learn
from flywheel.commands.models import models
from flywheel.commands.privacy import privacy
from flywheel.commands.process import process
from flywheel.commands.query import query
from flywheel.commands.report import report
from flywheel.commands.serve import serve
from flywheel.commands.simulate import simulate
from flywheel.commands.sink import sink
from flywheel.commands.stack import stack
from flywheel.commands.topics import topics
from flywheel.errors import FlywheelError


class _FlywheelGroup(click.Group):
    """Turns FlywheelError into a one-line message and exit 1: no traceback for user errors."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FlywheelError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_FlywheelGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flywheel-platform")
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default="text",
    envvar=logs.FORMAT_ENV,
    show_default=True,
    help=f"Log lines as text or JSON (env {logs.FORMAT_ENV}); status lines are unaffected.",
)
@click.option(
    "--log-level",
    type=click.Choice(logs.LEVELS, case_sensitive=False),
    default="warning",
    envvar=logs.LEVEL_ENV,
    show_default=True,
    help=f"Lowest level logged (env {logs.LEVEL_ENV}).",
)
@click.pass_context
def cli(ctx: click.Context, log_format: str, log_level: str) -> None:
    """Flywheel: online RL from IDE telemetry on Kafka, Parquet, DuckDB and PyTorch.

    Configuration comes from FLYWHEEL_* environment variables (see `docs/configuration.md`).
    With FLYWHEEL_BOOTSTRAP_SERVERS and FLYWHEEL_SCHEMA_REGISTRY_URL unset, commands use the
    embedded local stack under FLYWHEEL_HOME (default .flywheel/).
    """
    service = ctx.invoked_subcommand or "flywheel"
    logs.configure_logging(log_format, log_level, service=service, secrets=logs.env_secret_values())


cli.add_command(stack)
cli.add_command(topics)
cli.add_command(demo)
cli.add_command(features)
cli.add_command(gateway)
cli.add_command(process)
cli.add_command(simulate)
cli.add_command(sink)
cli.add_command(query)
cli.add_command(report)
cli.add_command(learn)
cli.add_command(models)
cli.add_command(doctor)
cli.add_command(privacy)
cli.add_command(serve)


def main() -> None:
    cli()
