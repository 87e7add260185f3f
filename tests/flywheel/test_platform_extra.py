"""The light install: the SDK imports nothing of the `platform` extra, and the CLI names the fix
for every command that needs it. The platform's modules are hidden in a subprocess here; the
real light install in a fresh virtualenv is tests/streams/test_light_install_integration.py."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.cli import COMMANDS, cli
from flywheel.platform_extra import (
    INSTALL_HINT,
    LIGHT_COMMANDS,
    NOT_INSTALLED,
    PLATFORM_MODULES,
    platform_missing,
)

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# What an IDE plug-in or the gateway imports (docs/sdk.md, docs/gateway.md).
SDK_MODULES = (
    "streams.client", "streams.spool", "streams.privacy", "streams.redaction", "streams.serde",
    "schemas.events", "flywheel.settings", "flywheel.clients", "streams.gateway",
    *(f"flywheel.commands.{name}" for name in sorted(LIGHT_COMMANDS)),
)  # fmt: skip

# Installed before anything else runs: the platform's modules then import as if not installed.
_HIDE = f"""
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(PLATFORM_MODULES)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Hide())
"""


def _without_platform(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", _HIDE + code, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _without_platform(
        "from flywheel.cli import main; sys.argv[0] = 'flywheel'; main()", *args
    )


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normalized(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def _third_party_imports() -> set[str]:
    """Top-level names the shipped packages import that are neither theirs nor the stdlib."""
    packages = {
        p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    names: set[str] = set()
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    # _typeshed exists for the type checker only (under TYPE_CHECKING)
    return {n for n in names - packages - set(sys.stdlib_module_names) if not n.startswith("_")}


def test_platform_modules_are_exactly_what_the_platform_extra_adds() -> None:
    base = _requirement_names(PYPROJECT["project"]["dependencies"])
    platform = _requirement_names(PYPROJECT["project"]["optional-dependencies"]["platform"])
    dists = packages_distributions()
    for name in sorted(_third_party_imports() | PLATFORM_MODULES):
        owners = {_normalized(d) for d in dists.get(name, [])}
        assert owners, f"{name} is imported but no installed distribution provides it"
        if name in PLATFORM_MODULES:
            assert owners & platform, f"{name} ({owners}) is not in the platform extra"
        else:
            assert owners & base, (
                f"{name} ({owners}) is in neither the base dependencies nor "
                "flywheel/platform_extra.PLATFORM_MODULES"
            )


def test_the_sdk_imports_without_the_platform() -> None:
    result = _without_platform(
        f"import importlib\nfor m in {SDK_MODULES!r}: importlib.import_module(m)"
    )
    assert result.returncode == 0, result.stderr


def test_help_lists_every_command_and_marks_those_that_need_the_platform() -> None:
    result = _cli("--help")
    assert result.returncode == 0, result.stderr
    listed = dict(
        re.findall(r"^  ([a-z][a-z-]*) +(.*)$", result.stdout.split("Commands:")[1], re.M)
    )
    assert set(listed) == set(COMMANDS)
    for name, summary in listed.items():
        assert (NOT_INSTALLED in summary) == (name not in LIGHT_COMMANDS), (name, summary)


def test_a_command_that_needs_the_platform_says_so_in_one_line() -> None:
    for args in (("learn", "--help"), ("sink", "--max-rows", "3"), ("features", "list")):
        result = _cli(*args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (args, result.stderr)
        assert f"flywheel {args[0]}" in lines[0] and INSTALL_HINT in lines[0]
    assert _cli("gateway", "--help").returncode == 0


@pytest.mark.parametrize(("missing", "one_line"), [("duckdb", True), ("no_such_module", False)])
def test_a_light_command_reaching_into_the_platform_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, missing: str, one_line: bool
) -> None:
    import flywheel.commands.topics as topics_command

    def reach(ctx: object) -> None:
        raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    monkeypatch.setattr(topics_command.topics, "invoke", reach)
    result = CliRunner().invoke(cli, ["topics", "list"])
    assert result.exit_code != 0
    if one_line:  # the platform's module: the fix, no traceback
        assert result.exit_code == 1 and INSTALL_HINT in result.output
    else:  # anything else is a broken install: it surfaces as it is
        assert isinstance(result.exception, ModuleNotFoundError)


def test_an_imported_faust_counts_as_installed() -> None:
    # faust replaces its module object with one whose __spec__ is None, and find_spec refuses
    # that: `flywheel query` in a process that had imported faust said the platform was missing.
    import faust  # noqa: F401

    platform_missing.cache_clear()
    try:
        assert platform_missing() is None
    finally:
        platform_missing.cache_clear()
