"""`flywheel sink` options: help, and bad input refused with a message naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.commands.sink import DEFAULT_TOPICS, sink


def test_help_lists_the_rotation_and_dlq_options() -> None:
    result = CliRunner().invoke(sink, ["--help"])
    assert result.exit_code == 0
    options = "topic lake max-rows max-mib max-age memory-mib max-record-bytes dlq-topic"
    for option in [*options.split(), "once", "instance-id"]:
        assert f"--{option}" in result.output


def test_the_default_topics_are_the_platform_data_topics() -> None:
    assert "telemetry.suggestions" in DEFAULT_TOPICS and "models.acks" in DEFAULT_TOPICS
    assert not any(t.startswith("dlq.") for t in DEFAULT_TOPICS)


@pytest.mark.parametrize("value", ["t=not.a.platform.topic", "=telemetry.edits", "t="])
def test_a_bad_topic_schema_is_a_usage_error(value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(sink, ["--topic", value, "--lake", str(tmp_path)])
    assert result.exit_code == 2
    assert "NAME=SCHEMA" in result.output or "=SCHEMA" in result.output


def test_a_topic_without_a_schema_fails_naming_the_fix(tmp_path: Path) -> None:
    result = CliRunner().invoke(sink, ["--topic", "someone.elses", "--lake", str(tmp_path)])
    assert result.exit_code == 2
    assert "--topic someone.elses=SCHEMA" in result.output


def test_a_budget_below_one_buffer_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        sink,
        ["--topic", "x=rewards", "--lake", str(tmp_path), "--max-mib", "64", "--memory-mib", "8"],
    )
    assert result.exit_code == 1
    assert "budget" in result.output
