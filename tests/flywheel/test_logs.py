"""flywheel.logs: one root handler, JSON lines with extras, secrets masked everywhere."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.errors import LoggingConfigError
from flywheel.logs import configure_logging, env_secret_values, json_logging, secret_values
from flywheel.settings import Settings

SECRET = "hunter2-s3cr3t"


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_fields_and_extras() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", service="sink", stream=stream)
    logging.getLogger("flywheel.test").info("wrote %d rows", 5, extra={"topic": "rewards", "n": 2})
    logging.getLogger("flywheel.test").debug("below the level")
    (line,) = lines(stream)
    assert line["level"] == "info" and line["logger"] == "flywheel.test"
    assert line["message"] == "wrote 5 rows" and line["service"] == "sink"
    assert line["topic"] == "rewards" and line["n"] == 2
    ts = datetime.fromisoformat(str(line["ts"]))
    assert ts.utcoffset() is not None and ts.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert json_logging()


def test_exceptions_and_odd_extras_stay_one_json_line() -> None:
    stream = io.StringIO()
    configure_logging("json", "warning", stream=stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("failed", extra={"path": Path("/tmp/a")})
    (line,) = lines(stream)
    assert "ValueError: boom" in str(line["exception"]) and line["path"] == "/tmp/a"


def test_secrets_are_masked_in_message_args_extras_and_tracebacks() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", secrets=[SECRET, ""], stream=stream)
    log = logging.getLogger("flywheel.test")
    log.info(f"connect with password={SECRET}")
    log.info("config %s", {"sasl.password": SECRET}, extra={"dsn": f"user:{SECRET}@host"})
    try:
        raise RuntimeError(f"auth failed for {SECRET}")
    except RuntimeError:
        log.exception("broker refused")
    assert SECRET not in stream.getvalue()
    first, second, third = lines(stream)
    assert first["message"] == "connect with password=****"
    assert "****" in str(second["message"]) and second["dsn"] == "user:****@host"
    assert "auth failed for ****" in str(third["exception"])


def test_text_format_masks_too_and_one_handler_is_kept() -> None:
    stream = io.StringIO()
    configure_logging("json", "info", stream=io.StringIO())
    configure_logging("text", "warn", secrets=[SECRET], stream=stream)
    ours = [h for h in logging.getLogger().handlers if type(h).__name__ == "_FlywheelHandler"]
    assert len(ours) == 1 and not json_logging()
    logging.getLogger("flywheel.sink").info("not shown")
    logging.getLogger("flywheel.sink").warning("key %s", SECRET)
    assert stream.getvalue() == "WARNING flywheel.sink: key ****\n"


def test_bad_format_or_level_names_the_choices() -> None:
    with pytest.raises(LoggingConfigError, match="text, json"):
        configure_logging("xml")
    with pytest.raises(LoggingConfigError, match="debug, info"):
        configure_logging("text", "loud")


def test_secret_values_come_from_the_settings(tmp_path: Path) -> None:
    env = {
        "FLYWHEEL_HOME": str(tmp_path),
        "FLYWHEEL_KAFKA_SASL_PASSWORD": SECRET,
        "FLYWHEEL_KAFKA_SASL_USERNAME": "alice",
        "FLYWHEEL_PSEUDONYM_KEY": "pseudo-key-123",
        "FLYWHEEL_BOOTSTRAP_SERVERS": "b:9092",
        "FLYWHEEL_SCHEMA_REGISTRY_URL": "https://u:regpass@reg/apis/ccompat/v7",
    }
    values = secret_values(Settings.from_env(env))
    assert set(values) == {SECRET, "pseudo-key-123", "regpass"}  # never the user name
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "pseudonym.key").write_text("generated-key\n")
    assert "generated-key" in secret_values(Settings.from_env(env))
    broken = {**env, "FLYWHEEL_BOOTSTRAP_SERVERS": ""}  # half an external cluster: invalid
    assert SECRET in env_secret_values(broken)


def test_the_cli_root_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from flywheel.cli import cli

    monkeypatch.setenv("FLYWHEEL_KAFKA_SASL_PASSWORD", SECRET)
    runner = CliRunner()
    result = runner.invoke(cli, ["--log-format", "json", "--log-level", "info", "query", "-h"])
    assert result.exit_code == 0 and json_logging()
    assert logging.getLogger().level == logging.INFO
    result = runner.invoke(cli, ["query", "-h"], env={"FLYWHEEL_LOG_FORMAT": "text"})
    assert result.exit_code == 0 and not json_logging()
    assert runner.invoke(cli, ["--log-format", "xml", "query", "-h"]).exit_code == 2
