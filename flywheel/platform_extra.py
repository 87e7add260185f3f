"""Which commands a light install (the SDK alone, `pip install flywheel-platform`) can run.

The base distribution holds the client SDK, the HTTP gateway and the commands that need nothing
else; the `platform` extra adds faust, pyarrow, DuckDB, torch and the rest (docs/dependencies.md).
A command that needs the extra on a light install names the fix in one line, not a traceback.
"""

from __future__ import annotations

import click

INSTALL_HINT = "pip install 'flywheel-platform[platform]'"

# Top-level import names of the `platform` extra's packages that Flywheel's code imports
# (tests/flywheel/test_platform_extra.py checks the list against the code and pyproject.toml).
PLATFORM_MODULES = frozenset({
    "aiokafka", "duckdb", "faust", "matplotlib", "numpy", "orjson", "pyarrow", "streaming",
    "tokenizers", "torch", "torchvision", "transformers", "yaml",
})  # fmt: skip


def missing_platform_module(exc: ModuleNotFoundError) -> str | None:
    """The missing module's top-level name when the `platform` extra provides it, else None
    (a missing module of the light install itself is a broken install: let it surface)."""
    top = (exc.name or "").split(".")[0]
    return top if top in PLATFORM_MODULES else None


def needs_platform(command: str, module: str) -> str:
    """The one line a light install prints for `flywheel <command>`."""
    return f"`flywheel {command}` needs the full platform (no module {module!r}): {INSTALL_HINT}"


def stand_in(command: str, module: str) -> click.Command:
    """A command that only prints `needs_platform` and exits 1, whatever its arguments
    (`--help` included): what `flywheel --help` lists where the real one cannot be imported."""

    def refuse() -> None:
        raise click.ClickException(needs_platform(command, module))

    return click.Command(
        command,
        callback=refuse,
        help=f"Needs the full platform: {INSTALL_HINT}",
        short_help=f"(needs {INSTALL_HINT})",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
