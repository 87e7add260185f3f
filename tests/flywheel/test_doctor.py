"""`flywheel doctor` without a broker: bad configuration, unreachable servers, no secret shown."""

from __future__ import annotations

import json
import socket
import time

import pytest
from click.testing import CliRunner

from flywheel.commands.doctor import doctor
from flywheel.doctor import (
    CHECKS,
    check_config,
    check_kafka,
    check_registry,
    public_url,
    run_checks,
)
from flywheel.errors import DoctorError


def _closed_port() -> int:
    # Bind and close: nothing listens there afterwards, so connecting is refused at once.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def unreachable_env(tmp_path: object) -> dict[str, str]:
    port = _closed_port()
    return {
        "FLYWHEEL_HOME": str(tmp_path),
        "FLYWHEEL_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
        "FLYWHEEL_SCHEMA_REGISTRY_URL": f"http://ops:registry-pw-123@127.0.0.1:{port}/apis/ccompat/v7",
        "FLYWHEEL_KAFKA_SASL_PASSWORD": "kafka-pw-456",
        "FLYWHEEL_PSEUDONYM_KEY": "pseudonym-key-789",
    }


SECRETS = ("registry-pw-123", "kafka-pw-456", "pseudonym-key-789")


def test_half_an_external_cluster_fails_the_config_check_with_its_fix() -> None:
    result, settings = check_config({"FLYWHEEL_BOOTSTRAP_SERVERS": "broker:9092"})
    assert settings is None
    assert not result.ok
    assert "FLYWHEEL_SCHEMA_REGISTRY_URL" in result.detail
    assert result.fix


def test_bad_config_stops_the_other_checks() -> None:
    results = run_checks({"FLYWHEEL_STACK_KAFKA_PORT": "ninety"})
    assert [(r.check, r.ok) for r in results] == [("config", False)]
    assert "FLYWHEEL_STACK_KAFKA_PORT" in results[0].detail


def test_a_closed_broker_port_fails_within_the_timeout() -> None:
    started = time.monotonic()
    result = check_kafka({"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, timeout_s=1.0)
    assert time.monotonic() - started < 5
    assert not result.ok
    assert "flywheel stack up" in result.fix


def test_a_closed_registry_port_fails_with_its_fix() -> None:
    result = check_registry(f"http://127.0.0.1:{_closed_port()}/apis/ccompat/v7", timeout_s=1.0)
    assert not result.ok
    assert "FLYWHEEL_SCHEMA_REGISTRY_URL" in result.fix


def test_unreachable_servers_skip_their_dependent_checks_and_hide_secrets(
    unreachable_env: dict[str, str],
) -> None:
    results = run_checks(unreachable_env, timeout_s=1.0)
    assert [r.check for r in results] == list(CHECKS)
    assert [r.ok for r in results] == [True, False, False, False, False, True]  # sandbox: here
    assert "skipped" in results[3].detail and "skipped" in results[4].detail
    text = "\n".join(f"{r.detail} {r.fix}" for r in results)
    for secret in SECRETS:
        assert secret not in text


def test_only_the_named_checks_are_reported(unreachable_env: dict[str, str]) -> None:
    results = run_checks(unreachable_env, only=["config"], timeout_s=1.0)
    assert [(r.check, r.ok) for r in results] == [("config", True)]
    with pytest.raises(DoctorError, match="choose from"):
        run_checks(unreachable_env, only=["nope"])


def test_public_url_drops_user_info() -> None:
    assert public_url("https://u:p@reg.example:8443/x") == "https://reg.example:8443/x"
    assert public_url("http://reg:8081/apis") == "http://reg:8081/apis"


def test_the_command_exits_1_prints_fixes_and_no_secret(unreachable_env: dict[str, str]) -> None:
    result = CliRunner().invoke(doctor, ["--timeout", "1s"], env=unreachable_env)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()  # CliRunner is no terminal: one check per line
    assert lines[0].split("\t") == ["check", "ok", "detail", "fix"]
    failed = [line.split("\t") for line in lines[1:] if "\tFAIL\t" in line]
    fixes = {check: fix for check, _, _, fix in failed}
    assert len(failed) == 4 and fixes["kafka"] != "-" and fixes["registry"] != "-"
    assert "2 passed, 4 failed" in result.output  # config and the sandbox pass
    for secret in SECRETS:
        assert secret not in result.output


def test_the_command_prints_json_records(unreachable_env: dict[str, str]) -> None:
    result = CliRunner().invoke(doctor, ["--timeout", "1s", "--json"], env=unreachable_env)
    assert result.exit_code == 1
    records = json.loads(result.stdout)
    assert [r["check"] for r in records][:1] == ["config"] and len(records) == 6
    failed = {r["check"]: r for r in records if not r["ok"]}
    assert len(failed) == 4 and failed["kafka"]["fix"] and failed["topics"]["fix"] is None
    assert "2 passed, 4 failed" in result.stderr
