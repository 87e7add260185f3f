"""Which commands a light install (the SDK alone, `pip install flywheel-platform`) can run.

The base distribution holds the client SDK, the HTTP gateway and the commands that need nothing
else; the `platform` extra adds faust, pyarrow, DuckDB, torch and the rest (docs/dependencies.md).
A command that needs the extra on a light install names the fix in one line, not a traceback.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

import click

# pip alone cannot resolve the extra (mosaicml-streaming's caps need the repository's overrides).
INSTALL_HINT = (
    "uv pip install --override overrides.txt 'flywheel-platform[platform]' (docs/dependencies.md)"
)
NOT_INSTALLED = "(needs the `platform` extra, not installed)"

# Top-level import names of the `platform` extra's packages (tests/flywheel/test_platform_extra.py
# checks the list against the code's imports and pyproject.toml).
PLATFORM_MODULES = frozenset({
    "aiokafka", "bm25s", "boto3", "botocore", "duckdb", "faust", "matplotlib", "numpy", "orjson",
    "pyarrow", "streaming", "tokenizers", "torch", "torchvision", "transformers", "usearch",
    "yaml",
})  # fmt: skip

# The commands a light install runs in full (tests/flywheel/test_platform_extra.py imports them
# with the platform hidden); `--help` marks the others NOT_INSTALLED.
LIGHT_COMMANDS = frozenset({"stack", "topics", "gateway", "doctor", "index"})


@functools.cache
def platform_missing() -> str | None:
    """The first module of the `platform` extra that is not installed, or None when it is all
    there. Looks the modules up without importing them (torch alone takes seconds)."""
    for name in sorted(PLATFORM_MODULES):
        if sys.modules.get(name) is not None:
            continue  # imported already (faust replaces its module: find_spec would refuse it)
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):  # a finder that refuses it: not usable either
            return name
    return None


def missing_platform_module(exc: ModuleNotFoundError) -> str | None:
    """The missing module's top-level name when the `platform` extra provides it, else None
    (a missing module of the light install itself is a broken install: let it surface)."""
    top = (exc.name or "").split(".")[0]
    return top if top in PLATFORM_MODULES else None


def needs_platform(command: str, module: str) -> str:
    """The one line a light install prints for `flywheel <command>`."""
    return (
        f"`flywheel {command}` needs the `platform` extra, which is not installed "
        f"(no module {module!r}): {INSTALL_HINT}"
    )


def stand_in(command: str, module: str) -> click.Command:
    """A command that only prints `needs_platform` and exits 1, whatever its arguments
    (`--help` included): what a light install has in place of a command outside LIGHT_COMMANDS."""

    def refuse() -> None:
        raise click.ClickException(needs_platform(command, module))

    return click.Command(
        command,
        callback=refuse,
        help=f"Needs the full platform: {INSTALL_HINT}",
        short_help=NOT_INSTALLED,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
