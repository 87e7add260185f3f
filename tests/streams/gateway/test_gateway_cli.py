"""`flywheel gateway`: key management from the command line, help, and a busy port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flywheel.cli import cli
from streams.gateway.keys import ApiKeyStore, default_key_path
from streams.gateway.parsing import GATEWAY_EVENT_TYPES


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def run(home: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["gateway", *args], env={"FLYWHEEL_HOME": str(home)})


@pytest.mark.parametrize(
    "args", [[], ["serve"], ["add-key"], ["revoke-key"], ["list-keys"]], ids=str
)
def test_every_command_has_help(home: Path, args: list[str]) -> None:
    result = run(home, *args, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_add_list_and_revoke_keys(home: Path) -> None:
    added = run(home, "add-key", "agents", "--types", "RolloutResult,TestRunCompleted")
    assert added.exit_code == 0, added.output
    secret = added.stdout.strip()
    assert secret.startswith("fw_")
    assert "shown only this once" in added.stderr
    store = ApiKeyStore(default_key_path(home))
    record = store.authenticate(secret)
    assert record is not None
    assert record.event_types == ("RolloutResult", "TestRunCompleted")

    listed = run(home, "list-keys")
    assert listed.exit_code == 0
    assert "agents" in listed.output
    assert "active" in listed.output
    assert secret not in listed.output

    assert run(home, "revoke-key", "agents").exit_code == 0
    assert "revoked" in run(home, "list-keys").output
    assert store.authenticate(secret) is not None
    assert store.records()[0].revoked


def test_a_key_defaults_to_every_type(home: Path) -> None:
    secret = run(home, "add-key", "ide").stdout.strip()
    record = ApiKeyStore(default_key_path(home)).authenticate(secret)
    assert record is not None
    assert set(record.event_types) == set(GATEWAY_EVENT_TYPES)


def test_listing_no_keys_says_how_to_add_one(home: Path) -> None:
    assert "flywheel gateway add-key" in run(home, "list-keys").output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add-key", "ide", "--types", "Reward"], "the gateway accepts SuggestionOffered"),
        (["add-key", "bad name"], "is not allowed"),
        (["revoke-key", "nobody"], "no key named 'nobody'"),
    ],
)
def test_user_errors_exit_1_with_the_fix(home: Path, args: list[str], message: str) -> None:
    result = run(home, *args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_duplicate_name_is_refused(home: Path) -> None:
    run(home, "add-key", "ide")
    result = run(home, "add-key", "ide")
    assert result.exit_code == 1
    assert "already exists" in result.output


def test_serve_on_a_busy_port_names_the_fix(home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(home, "serve", "--port", str(port))
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
    assert "--port" in result.output
