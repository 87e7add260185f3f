"""`flywheel`: the command line. Each command group lives in `flywheel/commands/`."""

from __future__ import annotations

import importlib
import os
from functools import partial
from typing import Any, cast

import click

from environments.isolation import TRUST_ENV
from flywheel import logs
from flywheel.options import rewrite_deprecated
from flywheel.platform_extra import (
    LIGHT_COMMANDS,
    missing_platform_module,
    needs_platform,
    platform_missing,
    stand_in,
)
from ground.errors import FlywheelError

# Command name -> the module under flywheel/commands/ defining it (same name, "-" as "_"; so is
# the command's function). Imported when the command runs (or `--help` lists them): a worker
# such as `flywheel sink` then never imports torch, mosaicml-streaming or matplotlib (~1 GB
# resident and seconds of start-up).
COMMANDS = (
    "stack", "topics", "demo", "features", "gateway", "process", "simulate", "sink", "query",
    "report", "learn", "models", "doctor", "privacy", "serve", "rollouts", "agent-users", "lake",
    "index",
)  # fmt: skip


class _FlywheelGroup(click.Group):
    """Loads commands lazily, and turns FlywheelError into a one-line message and exit 1: no
    traceback for user errors. On a light install (no `platform` extra) a command that needs
    the platform says so in one line (flywheel/platform_extra.py)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in LIGHT_COMMANDS and (missing := platform_missing()) is not None:
            return stand_in(cmd_name, missing)
        name = cmd_name.replace("-", "_")
        module = importlib.import_module(f"flywheel.commands.{name}")
        return cast(click.Command, getattr(module, name))  # tests/flywheel/test_cli.py runs each

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        warn = partial(click.echo, err=True)
        return name, command, rewrite_deprecated(name or "", rest, lambda m: warn(f"warning: {m}"))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FlywheelError as exc:
            raise click.ClickException(str(exc)) from exc
        except ModuleNotFoundError as exc:  # a light command reaching into the platform
            missing = missing_platform_module(exc)
            if missing is None:
                raise
            raise click.ClickException(
                needs_platform(str(ctx.invoked_subcommand), missing)
            ) from exc


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
@click.option(
    "--trust-model-code",
    is_flag=True,
    envvar=TRUST_ENV,
    help=f"Run model-written code WITHOUT the operating-system sandbox (env {TRUST_ENV}=1). "
    "Only for a host that is itself a boundary (a gVisor or Firecracker VM): without it, "
    "commands that run such code refuse to start where bubblewrap cannot isolate it.",
)
@click.pass_context
def cli(ctx: click.Context, log_format: str, log_level: str, trust_model_code: bool) -> None:
    """Flywheel: online RL from IDE telemetry on Kafka, Parquet, DuckDB and PyTorch.

    Configuration comes from FLYWHEEL_* environment variables (see `docs/configuration.md`).
    With FLYWHEEL_BOOTSTRAP_SERVERS and FLYWHEEL_SCHEMA_REGISTRY_URL unset, commands use the
    embedded local stack under FLYWHEEL_HOME (default .flywheel/).
    """
    if trust_model_code:  # for this process and every worker it starts (the demo's)
        os.environ[TRUST_ENV] = "1"
    service = ctx.invoked_subcommand or "flywheel"
    logs.configure_logging(log_format, log_level, service=service, secrets=logs.env_secret_values())


def main() -> None:
    cli()
